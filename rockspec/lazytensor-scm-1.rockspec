-- luarocks make --lua-version=5.4 rockspec/lazytensor-scm-1.rockspec
-- (from the checkout; without --lua-version luarocks builds for its own
-- default Lua, 5.1 on Debian: name the Lua that will load the module)
-- Builds the C module with the project's Makefile (targets `rock` and
-- `rock-install`, which take luarocks' paths) and installs the pure-Lua
-- submodules as lazytensor.<name>. Works offline: nothing is fetched.
rockspec_format = "3.0"
package = "lazytensor"
version = "scm-1"

source = {
   url = "git+https://github.com/lazytensor/lazytensor.git",
   branch = "main",
}

description = {
   summary = "Lazy structured matrices (diag, low-rank, Kronecker, Toeplitz, kernel, ...) for Lua",
   detailed = [[
      A C11 library of lazy, structured matrices that mix freely with dense
      tensors through one dispatch registry, with a Lua binding whose
      metamethods forward to that registry. Linear algebra (solves,
      log-determinants, Cholesky, eigh, SVD) uses the structure: Woodbury
      for low-rank plus diagonal, Kronecker eigendecompositions, FFT for
      Toeplitz, CG and Lanczos above max_cholesky_size.
   ]],
   homepage = "https://github.com/lazytensor/lazytensor",
   license = "MIT",
   labels = { "linear-algebra", "matrix", "gaussian-process" },
}

dependencies = {
   "lua >= 5.1, < 5.5",
}

-- Debian/Ubuntu: apt-get install libopenblas-dev liblapacke-dev libfftw3-dev
-- (cblas.h lives in a multiarch directory there; the Makefile finds it with
-- pkg-config, so only OpenBLAS's library is looked up here).
external_dependencies = {
   OPENBLAS = { library = "openblas" },
   LAPACKE = { header = "lapacke.h", library = "lapacke" },
   FFTW = { header = "fftw3.h", library = "fftw3" },
}

build = {
   type = "make",
   build_target = "rock",
   build_variables = {
      CFLAGS = "$(CFLAGS)",
      LIBFLAG = "$(LIBFLAG)",
      LUA_INCDIR = "$(LUA_INCDIR)",
      OPENBLAS_LIBDIR = "$(OPENBLAS_LIBDIR)",
      LAPACKE_INCDIR = "$(LAPACKE_INCDIR)",
      LAPACKE_LIBDIR = "$(LAPACKE_LIBDIR)",
      FFTW_INCDIR = "$(FFTW_INCDIR)",
      FFTW_LIBDIR = "$(FFTW_LIBDIR)",
   },
   install_target = "rock-install",
   install_variables = {
      LUA_INCDIR = "$(LUA_INCDIR)",
      INST_LIBDIR = "$(LIBDIR)",
      INST_LUADIR = "$(LUADIR)",
   },
   copy_directories = { "doc" },
}

-- `luarocks test`: the busted suite, run in this interpreter against the
-- module `luarocks make` built (see tools/luarocks-test.lua).
test = {
   type = "command",
   script = "tools/luarocks-test.lua",
}
