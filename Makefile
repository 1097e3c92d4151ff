# lazytensor — build, test, demo, bench.
#
#   make            lazytensor.so (Lua module, in the repository root) and
#                   liblazytensor.a / liblazytensor.so (the C core)
#   make test       installs missing Debian packages, builds, runs C tests
#                   and the busted suite; lists the skipped tests and ends
#                   with "N passed, M failed, K skipped"
#   make demo       installs missing packages, builds, runs the examples
#   make bench      benchmarks, one JSON line per measurement
#   make bench-peers  W5, W8 (linear_operator + torch) and GPY (GPyTorch 1.12's models) side by side
#                   (bench/peers/: needs Debian's python3-torch and a
#                   linear_operator tree, see bench/peers/setup.sh; the
#                   lazytensor rows run without them)
#   make install    headers, libraries, lazytensor.pc, the Lua module and
#                   Lua files under $(DESTDIR)$(PREFIX) (see "Installation")
#   make doc        the API reference (doc/api/) with ldoc
#   make lint       luacheck on all Lua, clang-format --dry-run on all C
#   make mpi        the module lazytensor.mpi (lazytensor/mpi.so) with Debian's
#                   OpenMPI; make test-mpi runs spec/mpi/ under mpirun
#                   (doc/mpi.md). Nothing else needs MPI.
#
# LUA selects the interpreter and headers (lua5.4 by default; also lua5.1,
# lua5.2, lua5.3, luajit). Objects go to build/$(LUA); the module for the
# selected LUA is copied to the repository root.

LUA ?= lua5.4
# Debian packages of the selected interpreter and its headers.
LUA_PKGS_lua5.1 = lua5.1 liblua5.1-0-dev
LUA_PKGS_luajit = luajit libluajit-5.1-dev
LUA_PKGS = $(or $(LUA_PKGS_$(LUA)),$(LUA) lib$(LUA)-dev)
PKGS = $(LUA_PKGS) liblapacke-dev libopenblas-dev libfftw3-dev lua-busted luarocks lua-check pkg-config

LUA_CFLAGS ?= $(shell pkg-config --cflags $(LUA) 2>/dev/null || echo -I/usr/include/$(LUA))
LUA_LIBS ?= $(shell pkg-config --libs $(LUA) 2>/dev/null || echo -l$(LUA))
DEP_CFLAGS := $(shell pkg-config --cflags lapacke openblas fftw3 2>/dev/null)
# libfftw3_threads: fftw_make_planner_thread_safe (see src/ops/toeplitz.c).
DEP_LIBS := -lfftw3_threads $(shell pkg-config --libs lapacke openblas fftw3 2>/dev/null || echo -llapacke -lopenblas -lfftw3) -lpthread -lm

OPT ?= -O2 -g
WARN = -Wall -Wextra -Werror
CFLAGS_ALL = -std=c11 $(WARN) $(OPT) -fPIC -D_POSIX_C_SOURCE=200809L $(DEP_CFLAGS) $(CFLAGS)
LDFLAGS_ALL = $(LDFLAGS)

BUILD = build/$(LUA)
# Version of the C library: LT_VERSION in src/lazytensor.h; the ABI number
# (the soname's) changes only when the C API breaks.
LT_VERSION := $(shell sed -n 's/^\#define LT_VERSION "\(.*\)"/\1/p' src/lazytensor.h)
LT_ABI = 0
CORE_SRC := $(wildcard src/core/*.c src/ops/*.c src/linalg/*.c)
BIND_SRC := $(wildcard lua/*.c)
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o)
BIND_OBJ := $(BIND_SRC:%.c=$(BUILD)/%.o)
C_TESTS := $(patsubst tests/c/%.c,$(BUILD)/tests/%,$(wildcard tests/c/*.c))

.PHONY: all deps test test-c test-lua demo bench bench-peers clean lint format install doc FORCE

all: lazytensor.so liblazytensor.a liblazytensor.so

$(BUILD)/src/%.o: src/%.c $(wildcard src/*.h src/*/*.h src/*/*.def)
	@mkdir -p $(dir $@)
	@echo "CC $<"; $(CC) $(CFLAGS_ALL) -c $< -o $@

# ops/kernel_eval.c evaluates kernel entries in loops that must vectorise:
# sqrt without errno and comparisons without trap semantics let them (see
# the file's header); -O3 turns on GCC's vectoriser in full.
$(BUILD)/src/ops/kernel_eval.o: CFLAGS_ALL += -O3 -fno-math-errno -fno-trapping-math -ffp-contract=fast
# ops/kernel_tilemul.c: multiply-adds fused where the CPU has FMA (see it).
$(BUILD)/src/ops/kernel_tilemul.o: CFLAGS_ALL += -O3 -ffp-contract=fast

$(BUILD)/lua/%.o: lua/%.c $(wildcard lua/*.h src/*.h)
	@mkdir -p $(dir $@)
	@echo "CC $<"; $(CC) $(CFLAGS_ALL) $(LUA_CFLAGS) -Isrc -c $< -o $@

liblazytensor.a: $(CORE_OBJ)
	rm -f $@
	$(AR) rcs $@ $^

# The shared core carries a soname: liblazytensor.so.$(LT_ABI).
liblazytensor.so: $(CORE_OBJ)
	$(CC) -shared -Wl,-soname,liblazytensor.so.$(LT_ABI) -o $@ $^ $(LDFLAGS_ALL) $(DEP_LIBS)

# The Lua module links the core statically: one file to install. It is
# built per LUA and copied to the root whenever it differs, so switching
# LUA never leaves a module built for another interpreter there.
$(BUILD)/lazytensor.so: $(BIND_OBJ) $(CORE_OBJ)
	$(CC) -shared -o $@ $^ $(LDFLAGS_ALL) $(DEP_LIBS)

lazytensor.so: $(BUILD)/lazytensor.so FORCE
	@cmp -s $< $@ || cp $< $@

FORCE:

$(BUILD)/tests/%: tests/c/%.c liblazytensor.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Isrc $< -o $@ liblazytensor.a $(DEP_LIBS)

# Installs the Debian packages the build and tests need, when missing.
deps:
	@sh tools/deps.sh $(PKGS)

# TEST_PROGRAMS: more programs that print "N passed, M failed" (blocks below;
# tools/testcount.sh also reads "N passed, M failed, K skipped").
test: deps
	@$(MAKE) --no-print-directory all $(C_TESTS) $(TEST_PROGRAMS)
	@LUA=$(LUA) sh tools/run-tests.sh $(LUA) $(C_TESTS) $(TEST_PROGRAMS)

RUN_LUA = LUA_CPATH='./?.so;;' LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' $(LUA)
DEMOS = examples/seed.lua examples/co2.lua examples/volcano.lua examples/learn_covariance.lua \
        examples/diabetes_ard.lua examples/deep_kernel.lua examples/breast_cancer.lua \
        examples/bo_demo.lua

demo: deps
	@$(MAKE) --no-print-directory all
	@for d in $(DEMOS); do echo "==> $$d"; $(RUN_LUA) $$d || exit 1; echo; done

bench: deps
	@$(MAKE) --no-print-directory all
	@sh bench/run.sh

bench-peers: deps
	@$(MAKE) --no-print-directory all
	@sh bench/peers/run.sh

# --- MPI (doc/mpi.md) -------------------------------------------------------
# `make mpi` builds the Lua module lazytensor.mpi (lazytensor/mpi.so, beside
# lazytensor.so) from src/mpi/ with Debian's OpenMPI; `make test-mpi` runs
# the distributed specs under mpirun with 1, 2 and 3 ranks. The core, `make`
# and `make test` never need MPI. The module is linked against the Lua
# module itself (DT_NEEDED lazytensor.so, found through rpath $ORIGIN/..),
# so it calls the library Lua loaded rather than a copy; -z nodelete keeps
# its type descriptor mapped until the process exits.
MPI_PKGS = libopenmpi-dev openmpi-bin
MPICC ?= mpicc
MPI_SRC := $(wildcard src/mpi/*.c)
MPI_OBJ := $(MPI_SRC:%.c=$(BUILD)/%.o)
MPI_MODULE = lazytensor/mpi.so

.PHONY: mpi mpi-deps test-mpi

mpi-deps:
	@sh tools/deps.sh $(MPI_PKGS)

$(BUILD)/src/mpi/%.o: src/mpi/%.c $(wildcard src/mpi/*.h src/*.h lua/compat.h)
	@mkdir -p $(dir $@)
	@echo "MPICC $<"; $(MPICC) $(CFLAGS_ALL) $(LUA_CFLAGS) -c $< -o $@

$(BUILD)/mpi.so: $(MPI_OBJ) $(BUILD)/lazytensor.so
	$(MPICC) -shared -o $@ $(MPI_OBJ) -L$(BUILD) -l:lazytensor.so \
	  -Wl,-rpath,'$$ORIGIN/..' -Wl,-z,nodelete $(LDFLAGS_ALL)

$(MPI_MODULE): $(BUILD)/mpi.so FORCE
	@mkdir -p lazytensor
	@cmp -s $< $@ || cp $< $@

mpi: mpi-deps
	@$(MAKE) --no-print-directory lazytensor.so $(MPI_MODULE)

test-mpi: mpi
	@sh tools/test-mpi.sh $(LUA)

# --- Lint (ecosystem) -------------------------------------------------------
# luacheck on all Lua (.luacheckrc), clang-format (.clang-format) on all C;
# `make format` rewrites the C files in place.
LINT_PKGS = lua-check clang-format
LINT_C = $(shell find src lua examples tests bench -name '*.[ch]' 2>/dev/null | sort)

lint: lazytensor.so
	@sh tools/deps.sh $(LINT_PKGS)
	luacheck -q .
	clang-format --dry-run -Werror $(LINT_C)
	@$(CHECK_DOC)
	@echo "lint: clean"

format:
	@sh tools/deps.sh clang-format
	clang-format -i $(LINT_C)

# --- Documentation (ecosystem) ----------------------------------------------
# doc/api/: the API reference by ldoc (doc/api.ld: doc/lazytensor.luadoc for
# the C module, the Lua modules' own comments, the guide). tools/doc-check.lua
# fails when a function or method of the module is not documented.
DOC_PKGS = lua-ldoc lua-discount
CHECK_DOC = LUA_CPATH='./?.so;;' LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' $(LUA) tools/doc-check.lua

doc: lazytensor.so
	@sh tools/deps.sh $(DOC_PKGS)
	@$(CHECK_DOC)
	ldoc -c doc/api.ld . | grep -v "definition cannot be parsed" || true
	@test -f doc/api/index.html && echo "doc: doc/api/index.html"

clean:
	rm -rf build lazytensor.so liblazytensor.a liblazytensor.so

# ---------------------------------------------------------------- reliability
# Test hosts (tests/host/*.c) embed Lua and link the module statically; they
# run in `make test` with the C tests. check-asan / check-valgrind /
# check-tsan run the suite under sanitizers and memcheck (see
# tools/reliability.sh); fuzz / fuzz-c run the long differential and
# adversarial fuzzers and the libFuzzer harness.
LUA_LIBS ?= $(shell pkg-config --libs $(LUA) 2>/dev/null || echo -l$(LUA))
# Allocation-failure injection (tests/host/allocfail) runs on every Lua. It
# opens the standard libraries before failures start (5.1's io library
# closes stdout when an allocation fails while it opens), and on LuaJIT fails
# only the allocations made for lazytensor's code (a memory error raised by
# Debian 12's LuaJIT VM inside a Lua function can crash its unwinder); see
# doc/reliability.md.
HOST_TESTS := $(BUILD)/tests/host/threads $(BUILD)/tests/host/allocfail
C_TESTS += $(HOST_TESTS)

$(BUILD)/tests/host/%: tests/host/%.c $(BIND_OBJ) liblazytensor.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LUA_CFLAGS) -Isrc $< -o $@ $(BIND_OBJ) liblazytensor.a \
	  $(LUA_LIBS) $(DEP_LIBS) -lpthread

# Sanitizer and fuzzing builds: `make BUILD=build/<kind> OPT=... <targets>`
# puts everything under that directory, never touching the normal objects,
# lazytensor.so or liblazytensor.a ($(BUILD)/lazytensor.so is built above).
$(BUILD)/liblazytensor.a: $(CORE_OBJ)
	rm -f $@
	$(AR) rcs $@ $^
$(BUILD)/ctest/%: tests/c/%.c $(BUILD)/liblazytensor.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Isrc $< -o $@ $(BUILD)/liblazytensor.a $(LDFLAGS_ALL) $(DEP_LIBS)
$(BUILD)/host/%: tests/host/%.c $(BIND_OBJ) $(BUILD)/liblazytensor.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LUA_CFLAGS) -Isrc $< -o $@ $(BIND_OBJ) $(BUILD)/liblazytensor.a \
	  $(LDFLAGS_ALL) $(LUA_LIBS) $(DEP_LIBS) -lpthread
$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/budget_alloc.h $(BUILD)/liblazytensor.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Isrc -fsanitize=fuzzer $< -o $@ $(BUILD)/liblazytensor.a \
	  $(LDFLAGS_ALL) $(DEP_LIBS)
# The binding's harness hosts Lua: the binding's objects and Lua as well.
$(BUILD)/fuzz/fuzz_lua: tests/fuzz/fuzz_lua.c tests/fuzz/budget_alloc.h $(BIND_OBJ) $(BUILD)/liblazytensor.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LUA_CFLAGS) -Isrc -fsanitize=fuzzer $< -o $@ $(BIND_OBJ) \
	  $(BUILD)/liblazytensor.a $(LDFLAGS_ALL) $(LUA_LIBS) $(DEP_LIBS)

.PHONY: check-asan check-valgrind check-tsan fuzz fuzz-c
# The specs that start a plain Lua (examples, api_contract, gc) load the
# root's lazytensor.so: `all` builds it first, as in check-valgrind.
check-asan: deps
	@$(MAKE) --no-print-directory all
	@sh tools/reliability.sh asan $(LUA)
check-valgrind: deps
	@sh tools/deps.sh valgrind
	@$(MAKE) --no-print-directory all
	@sh tools/reliability.sh valgrind $(LUA)
check-tsan: deps
	@$(MAKE) --no-print-directory all
	@sh tools/reliability.sh tsan $(LUA)
fuzz: deps
	@$(MAKE) --no-print-directory all
	LT_FUZZ_CASES=$${LT_FUZZ_CASES:-200000} LT_FUZZ_MAX_SIZE=$${LT_FUZZ_MAX_SIZE:-9} LT_FUZZ_MAX_DEPTH=$${LT_FUZZ_MAX_DEPTH:-5} \
	  LT_FUZZ_NUMERIC_CASES=$${LT_FUZZ_NUMERIC_CASES:-30000} LT_FUZZ_LARGE_CASES=$${LT_FUZZ_LARGE_CASES:-600} \
	  LT_FUZZ_DEFAULT_CASES=$${LT_FUZZ_DEFAULT_CASES:-40} LT_FUZZ_GRAD_CASES=$${LT_FUZZ_GRAD_CASES:-20000} \
	  LUA_CPATH='./?.so;;' \
	  LUA_PATH='./lua/?.lua;./lua/?/init.lua;./spec/?.lua;;' busted --lua=$(LUA) spec/fuzz_spec.lua
	LT_ADV_CASES=$${LT_ADV_CASES:-20000} LT_ADV_DEEP_CASES=$${LT_ADV_DEEP_CASES:-200} LUA_CPATH='./?.so;;' \
	  LUA_PATH='./lua/?.lua;./lua/?/init.lua;./spec/?.lua;;' busted --lua=$(LUA) spec/fuzz_adversarial_spec.lua
fuzz-c: deps
	@sh tools/deps.sh clang libclang-rt-14-dev
	@sh tools/reliability.sh fuzz-c $(LUA)
# --- Embedding (ecosystem) -------------------------------------------------
# examples/embed/host.c: a program hosting Lua with the module linked in.
# It links the binding's objects, the core and the selected LUA's library.
EMBED_HOST = $(BUILD)/examples/embed-host
TEST_PROGRAMS += $(EMBED_HOST)

$(EMBED_HOST): examples/embed/host.c $(BIND_OBJ) liblazytensor.a src/lazytensor_lua.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LUA_CFLAGS) -Isrc $< -o $@ $(BIND_OBJ) liblazytensor.a \
	  $(LUA_LIBS) $(DEP_LIBS)

# --- luarocks (ecosystem) --------------------------------------------------
# Targets for rockspec/lazytensor-scm-1.rockspec (build type "make"):
# luarocks passes LUA_INCDIR, CFLAGS and the external dependencies' dirs;
# objects go to build/rock-<headers' dir>. `rock` also copies the module to
# the root (for `luarocks test` from the checkout) unless LT_ROCK_NO_COPY is
# set. `make test` installs the rock into a temporary tree and loads it from
# there with only that tree's paths (tools/rock-smoke.sh).
ROCK_BUILD = build/rock-$(notdir $(LUA_INCDIR))
ROCK_DEP_CFLAGS = $(DEP_CFLAGS) $(addprefix -I,$(LAPACKE_INCDIR) $(FFTW_INCDIR))
ROCK_DEP_LIBS = $(addprefix -L,$(OPENBLAS_LIBDIR) $(LAPACKE_LIBDIR) $(FFTW_LIBDIR)) $(DEP_LIBS)

.PHONY: rock rock-install
rock:
	@test -n "$(LUA_INCDIR)" || { echo "rock: run by luarocks (LUA_INCDIR is not set)"; exit 1; }
	@$(MAKE) --no-print-directory BUILD=$(ROCK_BUILD) LUA_CFLAGS=-I$(LUA_INCDIR) \
	  DEP_CFLAGS="$(ROCK_DEP_CFLAGS)" DEP_LIBS="$(ROCK_DEP_LIBS)" $(ROCK_BUILD)/lazytensor.so
	@test -n "$(LT_ROCK_NO_COPY)" || cp $(ROCK_BUILD)/lazytensor.so lazytensor.so

# The pure-Lua modules, lua/lazytensor/**.lua, under directory $(1).
INSTALL_LUA_FILES = cd lua && find lazytensor -name '*.lua' | sort | \
  while read -r f; do install -D -m 644 "$$f" "$(1)/$$f" || exit 1; done

rock-install:
	install -d $(INST_LIBDIR) $(INST_LUADIR)/lazytensor
	install -m 755 $(ROCK_BUILD)/lazytensor.so $(INST_LIBDIR)/lazytensor.so
	$(call INSTALL_LUA_FILES,$(INST_LUADIR))

TEST_PROGRAMS += tools/rock-smoke.sh

# --- Installation (ecosystem) ----------------------------------------------
#   make install [PREFIX=/usr/local] [DESTDIR=] [LUA=lua5.4]
# installs lazytensor.h and lazytensor_lua.h, liblazytensor.so.$(LT_VERSION)
# (soname liblazytensor.so.$(LT_ABI)) and liblazytensor.a, the binding for
# hosts of $(LUA) as liblazytensor-$(LUA).a, pkg-config files lazytensor.pc
# and lazytensor-$(LUA).pc, the Lua module in $(LUA_CMOD_DIR) and the Lua
# files in $(LUA_LMOD_DIR)/lazytensor (Lua's default paths when PREFIX is
# /usr/local).
PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
LUA_V = $(if $(filter luajit%,$(LUA)),5.1,$(patsubst lua%,%,$(LUA)))
LUA_CMOD_DIR ?= $(LIBDIR)/lua/$(LUA_V)
LUA_LMOD_DIR ?= $(PREFIX)/share/lua/$(LUA_V)
BIND_LIB = $(BUILD)/liblazytensor-$(LUA).a
# In the .pc files, directories under PREFIX are written relative to ${prefix}.
PC_DIR = $(patsubst $(PREFIX)/%,$${prefix}/%,$(1))
SUBST_PC = sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(call PC_DIR,$(LIBDIR))|' \
  -e 's|@INCLUDEDIR@|$(call PC_DIR,$(INCLUDEDIR))|' \
  -e 's|@VERSION@|$(LT_VERSION)|g; s|@LUA@|$(LUA)|g; s|@DEP_LIBS@|$(strip $(DEP_LIBS))|'

$(BIND_LIB): $(BIND_OBJ)
	rm -f $@
	$(AR) rcs $@ $^

install: all $(BIND_LIB)
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PKGCONFIGDIR) \
	  $(DESTDIR)$(LUA_CMOD_DIR) $(DESTDIR)$(LUA_LMOD_DIR)/lazytensor
	install -m 644 src/lazytensor.h src/lazytensor_special.h src/lazytensor_lua.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 755 liblazytensor.so $(DESTDIR)$(LIBDIR)/liblazytensor.so.$(LT_VERSION)
	ln -sf liblazytensor.so.$(LT_VERSION) $(DESTDIR)$(LIBDIR)/liblazytensor.so.$(LT_ABI)
	ln -sf liblazytensor.so.$(LT_ABI) $(DESTDIR)$(LIBDIR)/liblazytensor.so
	install -m 644 liblazytensor.a $(BIND_LIB) $(DESTDIR)$(LIBDIR)/
	$(SUBST_PC) lazytensor.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/lazytensor.pc
	$(SUBST_PC) lazytensor-lua.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/lazytensor-$(LUA).pc
	install -m 755 lazytensor.so $(DESTDIR)$(LUA_CMOD_DIR)/lazytensor.so
	$(call INSTALL_LUA_FILES,$(abspath $(DESTDIR)$(LUA_LMOD_DIR)))

TEST_PROGRAMS += tools/install-check.sh
