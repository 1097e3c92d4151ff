# lazytensor — build, test, demo, bench.
#
#   make            lazytensor.so (Lua module, in the repository root) and
#                   liblazytensor.a / liblazytensor.so (the C core)
#   make test       installs missing Debian packages, builds, runs C tests
#                   and the busted suite; ends with "N passed, M failed"
#   make demo       installs missing packages, builds, runs the examples
#   make bench      benchmarks, one JSON line per measurement
#
# LUA selects the interpreter and headers (lua5.4 by default).

LUA ?= lua5.4
PKGS = lua5.4 liblua5.4-dev liblapacke-dev libopenblas-dev libfftw3-dev lua-busted luarocks lua-check pkg-config

LUA_CFLAGS ?= $(shell pkg-config --cflags $(LUA) 2>/dev/null || echo -I/usr/include/$(LUA))
DEP_CFLAGS := $(shell pkg-config --cflags lapacke openblas fftw3 2>/dev/null)
# libfftw3_threads: fftw_make_planner_thread_safe (see src/ops/toeplitz.c).
DEP_LIBS := -lfftw3_threads $(shell pkg-config --libs lapacke openblas fftw3 2>/dev/null || echo -llapacke -lopenblas -lfftw3) -lpthread -lm

OPT ?= -O2 -g
WARN = -Wall -Wextra -Werror
CFLAGS_ALL = -std=c11 $(WARN) $(OPT) -fPIC -D_POSIX_C_SOURCE=200809L $(DEP_CFLAGS) $(CFLAGS)
LDFLAGS_ALL = $(LDFLAGS)

BUILD = build/$(LUA)
CORE_SRC := $(wildcard src/core/*.c src/ops/*.c src/linalg/*.c)
BIND_SRC := $(wildcard lua/*.c)
CORE_OBJ := $(CORE_SRC:%.c=$(BUILD)/%.o)
BIND_OBJ := $(BIND_SRC:%.c=$(BUILD)/%.o)
C_TESTS := $(patsubst tests/c/%.c,$(BUILD)/tests/%,$(wildcard tests/c/*.c))

.PHONY: all deps test test-c test-lua demo bench clean lint

all: lazytensor.so liblazytensor.a liblazytensor.so

$(BUILD)/src/%.o: src/%.c $(wildcard src/*.h src/*/*.h)
	@mkdir -p $(dir $@)
	@echo "CC $<"; $(CC) $(CFLAGS_ALL) -c $< -o $@

$(BUILD)/lua/%.o: lua/%.c $(wildcard lua/*.h src/*.h)
	@mkdir -p $(dir $@)
	@echo "CC $<"; $(CC) $(CFLAGS_ALL) $(LUA_CFLAGS) -Isrc -c $< -o $@

liblazytensor.a: $(CORE_OBJ)
	rm -f $@
	$(AR) rcs $@ $^

liblazytensor.so: $(CORE_OBJ)
	$(CC) -shared -o $@ $^ $(LDFLAGS_ALL) $(DEP_LIBS)

# The Lua module links the core statically: one file to install.
lazytensor.so: $(BIND_OBJ) $(CORE_OBJ)
	$(CC) -shared -o $@ $^ $(LDFLAGS_ALL) $(DEP_LIBS)

$(BUILD)/tests/%: tests/c/%.c liblazytensor.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Isrc $< -o $@ liblazytensor.a $(DEP_LIBS)

# Installs the Debian packages the build and tests need, when missing.
deps:
	@sh tools/deps.sh $(PKGS)

test: deps
	@$(MAKE) --no-print-directory all $(C_TESTS)
	@sh tools/run-tests.sh $(LUA) $(C_TESTS)

RUN_LUA = LUA_CPATH='./?.so;;' LUA_PATH='./lua/?.lua;./lua/?/init.lua;;' $(LUA)
DEMOS = examples/seed.lua examples/co2.lua examples/volcano.lua

demo: deps
	@$(MAKE) --no-print-directory all
	@for d in $(DEMOS); do echo "==> $$d"; $(RUN_LUA) $$d || exit 1; echo; done

bench: deps
	@$(MAKE) --no-print-directory all
	@sh bench/run.sh

lint:
	luacheck lua spec examples bench

clean:
	rm -rf build lazytensor.so liblazytensor.a liblazytensor.so

# ---------------------------------------------------------------- reliability
# Test hosts (tests/host/*.c) embed Lua and link the module statically; they
# run in `make test` with the C tests. check-asan / check-valgrind /
# check-tsan run the suite under sanitizers and memcheck (see
# tools/reliability.sh); fuzz / fuzz-c run the long differential fuzzer and
# the libFuzzer harness.
LUA_LIBS ?= $(shell pkg-config --libs $(LUA) 2>/dev/null || echo -l$(LUA))
HOST_TESTS := $(BUILD)/tests/host/allocfail $(BUILD)/tests/host/threads
C_TESTS += $(HOST_TESTS)

$(BUILD)/tests/host/%: tests/host/%.c $(BIND_OBJ) liblazytensor.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(LUA_CFLAGS) -Isrc $< -o $@ $(BIND_OBJ) liblazytensor.a \
	  $(LUA_LIBS) $(DEP_LIBS) -lpthread

# Sanitizer and fuzzing builds: `make BUILD=build/<kind> OPT=... <targets>`
# puts everything under that directory, never touching the normal objects,
# lazytensor.so or liblazytensor.a.
$(BUILD)/lazytensor.so: $(BIND_OBJ) $(CORE_OBJ)
	$(CC) -shared -o $@ $^ $(LDFLAGS_ALL) $(DEP_LIBS)
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
$(BUILD)/fuzz/%: tests/fuzz/%.c $(BUILD)/liblazytensor.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Isrc -fsanitize=fuzzer $< -o $@ $(BUILD)/liblazytensor.a \
	  $(LDFLAGS_ALL) $(DEP_LIBS)

.PHONY: check-asan check-valgrind check-tsan fuzz fuzz-c
check-asan: deps
	@sh tools/reliability.sh asan $(LUA)
check-valgrind: deps
	@sh tools/deps.sh valgrind
	@$(MAKE) --no-print-directory all
	@sh tools/reliability.sh valgrind $(LUA)
check-tsan: deps
	@sh tools/reliability.sh tsan $(LUA)
fuzz: deps
	@$(MAKE) --no-print-directory all
	LT_FUZZ_CASES=$${LT_FUZZ_CASES:-200000} LT_FUZZ_MAX_SIZE=$${LT_FUZZ_MAX_SIZE:-9} LT_FUZZ_MAX_DEPTH=$${LT_FUZZ_MAX_DEPTH:-5} LUA_CPATH='./?.so;;' \
	  LUA_PATH='./lua/?.lua;./lua/?/init.lua;./spec/?.lua;;' busted --lua=$(LUA) spec/fuzz_spec.lua
fuzz-c: deps
	@sh tools/deps.sh clang libclang-rt-14-dev
	@sh tools/reliability.sh fuzz-c $(LUA)
