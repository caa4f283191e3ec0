# tidepool: code-mode execution engine for agents.
# `make run` and `make test` install what is missing (scripts/deps.sh), fetch Lua from
# Debian's trixie source package (scripts/fetch-lua.sh), build, and run.

# ---- settings -----------------------------------------------------------------------
PREFIX     ?= /usr/local
DESTDIR    ?=
LIBDIR     ?= $(PREFIX)/lib
BINDIR     ?= $(PREFIX)/bin
INCDIR     ?= $(PREFIX)/include
LUACMOD    ?= $(PREFIX)/lib/lua/5.4
DATADIR    ?= $(PREFIX)/share/tidepool
LIBEXECDIR ?= $(PREFIX)/libexec/tidepool
MANDIR     ?= $(PREFIX)/share/man
BUILD      ?= build
CC         ?= cc
OPT        ?= -O2 -g
SANITIZE   ?=
VERSION    := 0.1.0
# Fuzzing (make fuzz): clang's libFuzzer under ASan+UBSan, objects in their own directory.
FUZZ_CC      ?= clang
FUZZ_BUILD   ?= $(BUILD)/fuzz
FUZZ_OPT     ?= -O1 -g
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= $(patsubst spec/fuzz/%.c,%,$(wildcard spec/fuzz/fuzz_*.c))
FUZZ_ARGS    ?=

WARN_BASE   = -Wall -Wextra -Wshadow -Wmissing-prototypes -Wstrict-prototypes \
              -Wpointer-arith -Wcast-align -Wwrite-strings -Wundef -Wno-unused-parameter \
              -Werror=implicit-function-declaration
WARN_STRICT = $(WARN_BASE) -Wformat=2 -Wvla
PKGS        = jansson libpcre2-8 libuv libcurl libseccomp sqlite3 hiredis libmicrohttpd libcrypto
LUV_LIBS    = -llua5.4-luv -llua5.4-lpeg
# What the build reads of the installed system (pkg-config's flags for PKGS and libseccomp,
# Debian's static luv and lpeg, Debian's own Lua 5.4.4 for the embedding tests in
# spec/embed) is never read while this file is parsed: scripts/config.sh writes it into
# $(CONFIG_MK) after scripts/deps.sh has installed the packages, and make restarts with it
# (PKG_CFLAGS, PKG_LIBS, SECCOMP_CFLAGS, SECCOMP_LIBS, LUV_STATIC, DEB_LUA_CFLAGS,
# DEB_LUA_LIBS, DEB_LUA_A). Goals that build nothing neither install nor read anything.
# scripts/check-makefile.sh keeps it so: this file calls make's shell function nowhere.
CONFIG_MK   = $(BUILD)/config.mk
NO_CONFIG_GOALS = clean print-version deps uninstall lint test-fresh sanitize sanitize-c deb
ifneq ($(filter-out $(NO_CONFIG_GOALS),$(or $(MAKECMDGOALS),all)),)
include $(CONFIG_MK)
endif

ifneq ($(SANITIZE),)
SAN_FLAGS   = -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# gcc links the sanitizer runtimes under --no-as-needed, which then also holds for our
# libraries: Debian's liblua5.4-luv.so would become needed by every test and its Lua
# references unresolved. Debian's default, --as-needed, restored.
SAN_LDFLAGS = -Wl,--as-needed
endif

# Lua's source is shared by every build flavour (build/, build/sanitize/).
LUA_SRCDIR ?= build/lua-src
LUA_SRC     = $(LUA_SRCDIR)/src
LUA_DEFS    = -DLUA_USE_LINUX
LUA_CFLAGS  = -std=gnu99 $(OPT) -fPIC $(LUA_DEFS) $(SAN_FLAGS) -include engine/core/lua_patch.h
# Each layer compiles with its own headers and those of the layers below it, never those
# above (DESIGN.md section 2; scripts/check-layers.sh checks the includes and the calls).
# lib and core are also compiled with libuv's include guard defined, so that uv.h reads
# as empty there and any use of the event loop is a compile error. Front ends, tests and
# benches see every engine folder (LAYER_INC's default).
LAYER_INC_LIB   = -Iengine/lib -DUV_H
LAYER_INC_CORE  = -Iengine/core -Iengine/lib -Isandbox -DUV_H
LAYER_INC_HOST  = -Iengine/host -Iengine/core -Iengine/lib -Isandbox
LAYER_INC       = $(ENGINE_DIRS:%=-I%) -Isandbox
CFLAGS_ALL  = -std=gnu11 $(OPT) -fPIC -fvisibility=hidden $(WARN_STRICT) $(SAN_FLAGS) -D_GNU_SOURCE \
              -DTP_VERSION='"$(VERSION)"' -DTP_DATADIR='"$(DATADIR)"' \
              -DTP_LIBEXECDIR='"$(LIBEXECDIR)"' -Iengine/include $(LAYER_INC) -I$(LUA_SRC) $(PKG_CFLAGS) $(CFLAGS)
LDFLAGS_ALL = $(SAN_FLAGS) $(SAN_LDFLAGS) $(LDFLAGS)
# libcurl is opened on first use (engine/lib/curl_dl.c): nothing built here links it but
# the tests and benchmarks whose own code is an HTTP client (CURL_LIBS).
LIBS_ALL    = $(filter-out -lcurl,$(PKG_LIBS)) -lpthread -ldl -lm
CURL_LIBS   = -lcurl

# ---- sources ------------------------------------------------------------------------
LUA_CORE    = lapi lcode lctype ldebug ldo ldump lfunc lgc llex lmem lobject lopcodes \
              lparser lstate lstring ltable ltm lundump lvm lzio lauxlib lbaselib lcorolib \
              ldblib liolib lmathlib loadlib loslib lstrlib ltablib lutf8lib linit
LUA_OBJS    = $(LUA_CORE:%=$(BUILD)/lua-obj/%.o)
# engine/ by layer (DESIGN.md section 2): front ends over host over core over leaves.
# Objects keep flat names (build/obj/run.o): a file's name is unique across the layers.
ENGINE_DIRS = engine/front engine/host engine/core engine/lib
vpath %.c $(ENGINE_DIRS)
FRONT_SRCS  = $(wildcard engine/front/*.c)
# The MCP server (engine/front/mcp/, DESIGN.md section 9c): objects in obj/mcp/, since
# its file names (http.c) repeat the host's.
MCP_SRCS    = $(wildcard engine/front/mcp/*.c)
MCP_OBJS    = $(patsubst engine/front/mcp/%.c,$(BUILD)/obj/mcp/%.o,$(MCP_SRCS))
ENGINE_SRCS = $(wildcard engine/host/*.c engine/core/*.c engine/lib/*.c)
ENGINE_OBJS = $(patsubst %.c,$(BUILD)/obj/%.o,$(notdir $(ENGINE_SRCS)))
layer_objs  = $(patsubst %.c,$(1)/%.o,$(notdir $(wildcard engine/$(2)/*.c)))
$(call layer_objs,$(BUILD)/obj,lib) $(call layer_objs,$(FUZZ_BUILD)/obj,lib): LAYER_INC = $(LAYER_INC_LIB)
$(call layer_objs,$(BUILD)/obj,core) $(call layer_objs,$(FUZZ_BUILD)/obj,core): LAYER_INC = $(LAYER_INC_CORE)
$(call layer_objs,$(BUILD)/obj,host) $(call layer_objs,$(FUZZ_BUILD)/obj,host) $(BUILD)/obj/embedded.o: LAYER_INC = $(LAYER_INC_HOST)
GEN_SRCS    = $(BUILD)/gen/embedded.c
GEN_OBJS    = $(BUILD)/obj/embedded.o
# The config file's schema travels in the library too (engine/host/config.c checks with it).
EMBED_FILES = $(wildcard sandbox/*.lua) $(wildcard lua/*.lua) engine/host/config.schema.json
HEADERS     = $(wildcard $(ENGINE_DIRS:%=%/*.h) engine/front/mcp/*.h) $(wildcard engine/include/*.h) $(wildcard sandbox/*.h)
CTEST_SRCS  = $(wildcard spec/c/test_*.c)
CTESTS      = $(CTEST_SRCS:spec/c/%.c=$(BUILD)/tests/%)
BENCH_SRCS  = $(wildcard bench/*.c)
BENCHES     = $(BENCH_SRCS:bench/%.c=$(BUILD)/bench/%)

LUA_BIN     = $(BUILD)/lua/lua
LIBLUA      = $(BUILD)/lua/liblua.a
LIB_A       = $(BUILD)/libtidepool.a
LIB_SO      = $(BUILD)/libtidepool.so
LIB_OBJ     = $(BUILD)/obj/tidepool-lib.o
EXPORTS     = $(BUILD)/obj/tidepool.exports
LIB_INT     = $(BUILD)/obj/libtidepool-internal.a
EMBED_TESTS = $(addprefix $(BUILD)/embed/foreign_lua_,so_first so_last static static_both)
CLI         = $(BUILD)/tidepool
LUAMOD      = $(BUILD)/lua/tidepool.so
PCFILE      = $(BUILD)/tidepool.pc
CONFINE     = $(BUILD)/tidepool-confine
DEPS_STAMP  = $(BUILD)/.deps-ok

.PHONY: all deps run test spec test-c test-cluster test-fast test-fresh test-alloc-full sanitize sanitize-c valgrind bench install \
        uninstall clean lint fuzz fuzz-build deb man print-version FORCE
all: $(CLI) $(LIB_A) $(LIB_SO) $(LUAMOD) $(LUA_BIN) $(PCFILE) $(CONFINE)

# ---- setup --------------------------------------------------------------------------
deps: $(DEPS_STAMP)
$(DEPS_STAMP): scripts/deps.sh
	@sh scripts/deps.sh
	@mkdir -p $(BUILD) && touch $@

# The system's flags and paths, read once the packages are there (see CONFIG_MK above).
$(CONFIG_MK): scripts/config.sh $(DEPS_STAMP)
	@CC='$(CC)' PKGS='$(PKGS)' sh scripts/config.sh $@

$(LUA_SRCDIR)/.tidepool-patched: scripts/fetch-lua.sh | $(DEPS_STAMP)
	@sh scripts/fetch-lua.sh $(LUA_SRCDIR)

# ---- Lua (Debian trixie's 5.4.7, our patch to lstrlib.c) -------------------------------
$(BUILD)/lua-obj/%.o: $(LUA_SRCDIR)/.tidepool-patched engine/core/lua_patch.h
	@mkdir -p $(@D)
	$(CC) $(LUA_CFLAGS) -c $(LUA_SRC)/$*.c -o $@

$(LIBLUA): $(LUA_OBJS)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(LUA_BIN): $(BUILD)/lua-obj/lua.o $(LIBLUA)
	$(CC) $(LDFLAGS_ALL) -Wl,-E -o $@ $< $(LIBLUA) -ldl -lm

# ---- engine -------------------------------------------------------------------------
$(BUILD)/obj/%.o: %.c $(HEADERS) $(LUA_SRCDIR)/.tidepool-patched
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# The front ends (engine/front) see the public API only: their include path is
# engine/include (tidepool.h) and the system's, plus jansson's and libuv's; the Lua module
# also Lua's headers (the C API of whichever Lua 5.4 loads it). front-api.ok then checks
# that their objects call nothing of the engine but the library's exports.
FRONT_OBJS   = $(patsubst %.c,$(BUILD)/obj/%.o,$(notdir $(FRONT_SRCS)))
FRONT_CFLAGS = -std=gnu11 $(OPT) -fPIC -fvisibility=hidden $(WARN_STRICT) $(SAN_FLAGS) \
               -D_GNU_SOURCE -DTP_VERSION='"$(VERSION)"' -DTP_DATADIR='"$(DATADIR)"' \
               -Iengine/include $(PKG_CFLAGS) $(CFLAGS)
$(BUILD)/obj/luamod.o: FRONT_CFLAGS += -I$(LUA_SRC)
$(FRONT_OBJS): $(BUILD)/obj/%.o: engine/front/%.c $(wildcard engine/front/*.h engine/front/mcp/*.h) \
               engine/include/tidepool.h engine/include/tidepool_server.h $(LUA_SRCDIR)/.tidepool-patched
	@mkdir -p $(@D)
	$(CC) $(FRONT_CFLAGS) -c $< -o $@
$(MCP_OBJS): $(BUILD)/obj/mcp/%.o: engine/front/mcp/%.c $(wildcard engine/front/*.h engine/front/mcp/*.h) \
               engine/include/tidepool.h engine/include/tidepool_server.h $(LUA_SRCDIR)/.tidepool-patched
	@mkdir -p $(@D)
	$(CC) $(FRONT_CFLAGS) -Iengine/front -c $< -o $@

# Every tp_* symbol a front end leaves undefined is an export of the library or a function
# of another front end (tp__options_*, tp__mcp_*).
$(BUILD)/obj/front-api.ok: $(FRONT_OBJS) $(MCP_OBJS) $(EXPORTS)
	@nm -u $(FRONT_OBJS) $(MCP_OBJS) | awk '$$2 ~ /^tp_/ { print $$2 }' | sort -u > $@.tmp; \
	nm --defined-only $(FRONT_OBJS) $(MCP_OBJS) | awk '$$3 ~ /^tp_/ { print $$3 }' | sort -u \
	  | cat - $(EXPORTS) | sort -u | comm -23 $@.tmp - > $@.bad; \
	if [ -s $@.bad ]; then cat $@.bad; rm -f $@.tmp $@.bad; \
	  echo "$@: the front ends call the engine's internals above: use tidepool.h" >&2; \
	  exit 1; fi; rm -f $@.tmp $@.bad; touch $@

$(GEN_SRCS): scripts/embed.lua $(EMBED_FILES) $(LUA_BIN)
	@mkdir -p $(@D)
	$(LUA_BIN) scripts/embed.lua $@ $(EMBED_FILES)

$(BUILD)/obj/embedded.o: $(GEN_SRCS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -Wno-missing-prototypes -c $< -o $@

# ---- the public library: only tp_* leaves it -------------------------------------------
# The engine is compiled with -fvisibility=hidden, so its only default-visibility symbols
# are the TP_EXTERN functions of tidepool.h: they are the export list. The engine, its Lua
# and Debian's static luv and lpeg (whose lua_* calls must reach this Lua, not the one a
# program may link) are joined into one relocatable object, in which every other global
# symbol is then made local. libtidepool.a is that object, libtidepool.so is linked from
# it, and a program that links another Lua, before or after, cannot take ours or give us
# its own. The build stops if anything but tp_* would be exported, or if the object still
# needs a Lua symbol from outside.
$(EXPORTS): $(ENGINE_OBJS) $(GEN_OBJS)
	readelf -sW $^ | awk '$$5 == "GLOBAL" && $$6 == "DEFAULT" && $$7 != "UND" { print $$8 }' \
	  | sort -u > $@.tmp
	@if grep -v '^tp_[a-z0-9][a-z0-9_]*$$' $@.tmp; then rm -f $@.tmp; \
	  echo "$@: the symbols above would be exported (not tp_*): make them static or" \
	    "hidden (or objects older than -fvisibility=hidden are left: make clean)" >&2; \
	  exit 1; fi
	mv $@.tmp $@

# Debian's static luv is compiled for executables: it reads libc's stderr PC-relative
# (a copy relocation), which a shared library cannot hold. That reference is renamed to
# a variable of host.c, tp__luv_stderr, which holds libc's stderr. The library's rule
# below stops the build if any such reference to an outside symbol is left.
$(BUILD)/obj/luv-lib.o: $(firstword $(LUV_STATIC))
	@mkdir -p $(@D)
	$(LD) -r -o $@.tmp --whole-archive $<
	objcopy --redefine-sym stderr=tp__luv_stderr $@.tmp $@
	rm -f $@.tmp

$(LIB_OBJ): $(ENGINE_OBJS) $(GEN_OBJS) $(LUA_OBJS) $(EXPORTS) $(BUILD)/obj/luv-lib.o
	$(LD) -r -o $@.tmp $(ENGINE_OBJS) $(GEN_OBJS) $(LUA_OBJS) $(BUILD)/obj/luv-lib.o \
	  $(lastword $(LUV_STATIC))
	objcopy --keep-global-symbols=$(EXPORTS) $@.tmp $@
	rm -f $@.tmp
	@nm -u $@ | awk '{ print $$2 }' > $@.undef; \
	if grep -E '^(lua|luaL|luaopen|luv|lpeg)_' $@.undef; then \
	  echo "$@: the Lua symbols above are not resolved inside the library" >&2; \
	  rm -f $@ $@.undef; exit 1; fi; \
	if readelf -rW $@ | awk '$$3 ~ /^R_X86_64_(PC32|32|32S)$$/ { print $$5 }' | sort -u | \
	   grep -Fx -f $@.undef; then \
	  echo "$@: the symbols above are read PC-relative from outside: a shared library" \
	    "cannot hold that (rename them as luv-lib.o does for stderr)" >&2; \
	  rm -f $@ $@.undef; exit 1; fi; \
	rm -f $@.undef

$(LIB_A): $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(LIB_SO): $(LIB_OBJ)
	$(CC) -shared $(LDFLAGS_ALL) -Wl,-soname,libtidepool.so.0 -o $@ $^ $(LIBS_ALL)
	ln -sf libtidepool.so $(BUILD)/libtidepool.so.0

# The C tests and the benchmarks use internal functions too: they link every object as is,
# with Debian's shared luv and lpeg taking Lua from the executable (-Wl,-E). So does the
# CLI, which calls only the public API (front-api.ok) but whose plugins may load Lua C
# modules, which need the executable's Lua.
$(LIB_INT): $(ENGINE_OBJS) $(GEN_OBJS) $(LUA_OBJS)
	rm -f $@ && ar rcs $@ $^

$(CLI): $(BUILD)/obj/cli.o $(BUILD)/obj/options.o $(BUILD)/obj/caller_pipe.o $(BUILD)/obj/audit_show.o $(MCP_OBJS) $(LIB_INT) \
        $(BUILD)/obj/front-api.ok
	$(CC) $(LDFLAGS_ALL) -Wl,-E -o $@ $(BUILD)/obj/cli.o $(BUILD)/obj/options.o \
	  $(BUILD)/obj/caller_pipe.o $(BUILD)/obj/audit_show.o $(MCP_OBJS) $(LIB_INT) $(LUV_LIBS) $(LIBS_ALL)

# The helper proc.run spawns (tools/proc.lua): it confines itself (rlimits, Landlock,
# seccomp), then execve's the command. A program of its own, so that the engine never
# forks by hand; found next to the program or library, or in LIBEXECDIR once installed.
$(CONFINE): libexec/tidepool-confine.c libexec/confine_cgroup.h
	@mkdir -p $(@D)
	$(CC) -std=gnu11 $(OPT) $(WARN_STRICT) $(SAN_FLAGS) -D_GNU_SOURCE $(CFLAGS) \
	  $(SECCOMP_CFLAGS) $(LDFLAGS_ALL) -o $@ $< $(SECCOMP_LIBS)

# The Lua module talks to the Lua that loads it only through that Lua's C API (luamod.o
# leaves lua_* undefined for it) and runs its engine on the library's private Lua, so it
# loads into any Lua 5.4 host (Debian's lua5.4 included). It exports luaopen_tidepool only.
$(BUILD)/obj/luamod.map:
	@mkdir -p $(@D)
	printf '%s\n' '{ global: luaopen_tidepool; local: *; };' > $@

$(LUAMOD): $(BUILD)/obj/luamod.o $(LIB_OBJ) $(BUILD)/obj/luamod.map $(BUILD)/obj/front-api.ok
	@mkdir -p $(@D)
	$(CC) -shared $(LDFLAGS_ALL) -Wl,--version-script=$(BUILD)/obj/luamod.map -o $@ \
	  $(BUILD)/obj/luamod.o $(LIB_OBJ) $(LIBS_ALL)

# The install paths are compiled in (TP_DATADIR: the built-in tools, in options.o and luamod.o)
# and written into the pkg-config file. This stamp holds the paths of the last build and
# changes only when they do, so `make install PREFIX=/opt/tp` after a plain `make`
# rebuilds those objects and the file for /opt/tp instead of installing /usr/local's.
PATHS_STAMP = $(BUILD)/obj/install-paths
$(PATHS_STAMP): FORCE
	@mkdir -p $(@D)
	@paths='$(PREFIX) $(LIBDIR) $(INCDIR) $(DATADIR)'; \
	if [ "$$(cat $@ 2>/dev/null)" != "$$paths" ]; then printf '%s\n' "$$paths" > $@; fi
FORCE:
$(BUILD)/obj/cli.o $(BUILD)/obj/options.o $(BUILD)/obj/luamod.o $(BUILD)/obj/proc.o: $(PATHS_STAMP)

# tidepool.h includes only the C library's headers, and libtidepool.so is linked with its
# libraries: `pkg-config --cflags --libs tidepool` needs nothing else installed (no
# Requires). --static adds the libraries libtidepool.a needs, as the build linked them.
$(PCFILE): Makefile $(PATHS_STAMP) $(CONFIG_MK)
	@mkdir -p $(@D)
	printf '%s\n' 'prefix=$(PREFIX)' 'libdir=$(LIBDIR)' 'includedir=$(INCDIR)' '' \
	  'Name: tidepool' 'Description: code-mode execution engine for agents (sandboxed Lua 5.4)' \
	  'Version: $(VERSION)' \
	  'Libs: -L$${libdir} -ltidepool' 'Libs.private: $(strip $(filter-out -lcurl,$(PKG_LIBS))) -lpthread -ldl -lm' \
	  'Cflags: -I$${includedir}' > $@

# ---- tests and benchmarks -------------------------------------------------------------
$(BUILD)/tests/%: spec/c/%.c spec/c/tp_test.h $(LIB_INT)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) -Ispec/c $(LDFLAGS_ALL) $(CTEST_LDFLAGS) -Wl,-E -o $@ $< $(CTEST_OBJS) \
	  $(LIB_INT) $(LUV_LIBS) $(LIBS_ALL) $(CURL_LIBS)

# test_auth tests a front end's own object, the HTTP authenticator (engine/front/mcp/auth.c).
$(BUILD)/tests/test_auth: CTEST_OBJS = $(BUILD)/obj/mcp/auth.o
$(BUILD)/tests/test_auth: $(BUILD)/obj/mcp/auth.o

# test_http and bench_http share a small HTTP server on 127.0.0.1.
$(BUILD)/tests/test_http $(BUILD)/bench/bench_http: spec/c/http_server.h
$(BUILD)/tests/test_pool $(BUILD)/tests/test_lazy: spec/c/fingerprint.h

# test_confine_cgroup drives tidepool-confine's choice of a cgroup on a fake cgroup root.
$(BUILD)/tests/test_confine_cgroup: libexec/confine_cgroup.h

# test_alloc_fail makes the engine's allocations fail one by one: the engine's objects
# (and its Lua's) call these functions through the test's counting wrappers.
$(BUILD)/tests/test_alloc_fail: CTEST_LDFLAGS = \
  -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=free,--wrap=strdup,--wrap=vasprintf

$(BUILD)/bench/%: bench/%.c bench/bench.h bench/bench_later.h $(LIB_INT)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_ALL) $(LDFLAGS_ALL) -Wl,-E -o $@ $< $(LIB_INT) $(LUV_LIBS) $(LIBS_ALL) $(CURL_LIBS)

# A program that uses Debian's own Lua (liblua5.4, 5.4.4) and embeds tidepool, linked four
# ways: Debian's shared Lua ahead of libtidepool.so, after it, with libtidepool.a, and
# both static. It sees only tidepool.h and Debian's lua.h (spec/embed/foreign_lua.c).
EMBED_CFLAGS = -std=gnu11 $(OPT) $(WARN_STRICT) $(SAN_FLAGS) -Iengine/include -Ispec/c \
               $(DEB_LUA_CFLAGS)
$(BUILD)/embed/foreign_lua.o: spec/embed/foreign_lua.c spec/c/tp_test.h engine/include/tidepool.h
	@mkdir -p $(@D)
	$(CC) $(EMBED_CFLAGS) -c $< -o $@

$(BUILD)/embed/foreign_lua_so_first: $(BUILD)/embed/foreign_lua.o $(LIB_SO)
	$(CC) $(LDFLAGS_ALL) -o $@ $< $(DEB_LUA_LIBS) -L$(BUILD) -Wl,-rpath,$(abspath $(BUILD)) \
	  -ltidepool -ldl

$(BUILD)/embed/foreign_lua_so_last: $(BUILD)/embed/foreign_lua.o $(LIB_SO)
	$(CC) $(LDFLAGS_ALL) -o $@ $< -L$(BUILD) -Wl,-rpath,$(abspath $(BUILD)) -ltidepool \
	  $(DEB_LUA_LIBS) -ldl

$(BUILD)/embed/foreign_lua_static: $(BUILD)/embed/foreign_lua.o $(LIB_A)
	$(CC) $(LDFLAGS_ALL) -o $@ $< $(DEB_LUA_LIBS) $(LIB_A) $(LIBS_ALL)

$(BUILD)/embed/foreign_lua_static_both: $(BUILD)/embed/foreign_lua.o $(LIB_A)
	$(CC) $(LDFLAGS_ALL) -o $@ $< $(DEB_LUA_A) $(LIB_A) $(LIBS_ALL)

test: all $(CTESTS) $(EMBED_TESTS)
	@BUILD=$(BUILD) sh scripts/run-tests.sh

# The two commands on a fresh machine: a minimal Debian bookworm root (mmdebstrap, as root)
# with make, git and ca-certificates, this checkout's HEAD cloned into it, `make run` there
# (FRESH=full: then `make test`). Not part of make test: minutes (scripts/test-fresh.sh).
FRESH ?= run
test-fresh:
	@FRESH='$(FRESH)' sh scripts/test-fresh.sh

# Redis and three `tidepool mcp --http` servers sharing it (scripts/cluster-test.sh).
test-cluster: all
	@BUILD=$(BUILD) sh scripts/cluster-test.sh

# The C tests alone, each file in its own process under a timeout (TP_TEST_TIMEOUT, 600 s):
#   make test-c                                   every file
#   make test-c T=test_api:cancel                 test_api's tests whose name has "cancel"
#   make test-c T='api:cancel,session host'       several files, several names
#   make sanitize-c T=alloc_fail                  the same under ASan+UBSan+LeakSanitizer
# One file by hand: build/tests/test_api cancel (--list prints its tests' names).
# (test_hostile runs the CLI, so it is built too.)
test-c: $(CLI) $(if $(T),$(foreach t,$(T),$(BUILD)/tests/test_$(patsubst test_%,%,$(firstword $(subst :, ,$(t))))),$(CTESTS))
	@BUILD=$(BUILD) sh scripts/run-ctests.sh $(T)

run: all
	$(CLI) run examples/report.lua

bench: all $(BENCHES) $(BUILD)/tests/test_hostile
	@BUILD=$(BUILD) sh scripts/run-bench.sh

# make test and the allocation-failure sweep, every point, under ASan+UBSan+LeakSanitizer.
sanitize:
	$(MAKE) BUILD=build/sanitize SANITIZE=address,undefined OPT='-O1 -g' test
	$(MAKE) BUILD=build/sanitize SANITIZE=address,undefined OPT='-O1 -g' test-alloc-full

# test_alloc_fail fails a fixed sample of each scenario's allocation points in make test
# (about 10 s of CPU); this fails every one of them, alone and with all after it: about
# 2 x 58,000 runs, 10 minutes of CPU (TP_TEST_TIMEOUT: ALLOC_FULL_TIMEOUT seconds).
ALLOC_FULL_TIMEOUT ?= 10800
test-alloc-full: $(BUILD)/tests/test_alloc_fail
	@TP_ALLOC_FAIL_FULL=1 TP_TEST_TIMEOUT=$(ALLOC_FULL_TIMEOUT) BUILD=$(BUILD) \
	  sh scripts/run-ctests.sh test_alloc_fail

# One spec, by name:
#   make spec S=policy                    spec/policy_spec.lua (busted, this build's Lua)
#   make spec S=policy F='ask'            only its tests whose name has "ask" (--filter)
#   make spec S=mcp/era                   spec/mcp/era.mjs (node; any spec/X.mjs)
#   make spec S=examples/plugin/units_spec.lua   a file by its path
S ?=
F ?=
spec: all
	@if [ -z '$(S)' ]; then echo "make spec S=NAME: spec/NAME_spec.lua, spec/NAME.mjs or a path" >&2; exit 2; fi
	@s='$(S)'; \
	 for f in "$$s" "spec/$${s}_spec.lua" "spec/$$s.mjs" "spec/$$s"; do \
	   [ -f "$$f" ] && break; f=; done; \
	 case $$f in \
	   '') echo "make spec: no spec/$${s}_spec.lua, spec/$$s.mjs or $$s" >&2; exit 2 ;; \
	   *.mjs) BUILD=$(BUILD) exec node "$$f" ;; \
	   *) BUILD=$(BUILD) LUA_PATH='./?.lua;./?/init.lua;;' LUA_CPATH='$(BUILD)/lua/?.so;;' \
	        exec $(LUA_BIN) /usr/bin/busted $(if $(F),--filter='$(F)') "$$f" ;; \
	 esac

# The developer's loop: the C tests and the busted specs, once each (make test runs busted
# three times and every other suite), side by side (busted in two halves); about 70 s on a
# 2-core machine once built (load 3).
test-fast: all $(CTESTS)
	@BUILD=$(BUILD) sh scripts/run-tests.sh --fast

sanitize-c:
	$(MAKE) BUILD=build/sanitize SANITIZE=address,undefined OPT='-O1 -g' test-c

valgrind: all $(CTESTS)
	@BUILD=$(BUILD) sh scripts/valgrind.sh

lint:
	luacheck --no-color -q sandbox lua tools spec scripts examples

# ---- fuzzing ------------------------------------------------------------------------
# Every spec/fuzz/fuzz_*.c is a libFuzzer target (LLVMFuzzerTestOneInput) linked with the
# engine, the MCP server (engine/front/mcp/, and options.c whose helpers it calls) and
# Lua, all built by clang with coverage and ASan+UBSan in $(FUZZ_BUILD). The embedded Lua
# files ($(GEN_SRCS)) and Lua's source are shared with the plain build.
#   make fuzz                              each target for FUZZ_SECONDS (default 60)
#   make fuzz FUZZ_TARGETS=fuzz_json FUZZ_SECONDS=600 FUZZ_ARGS='-max_len=8192'
#   build/fuzz/fuzz_json build/fuzz/artifacts/json/crash-...   replays one input
#   build/fuzz/fuzz_json build/fuzz/corpus/json spec/fuzz/corpus/json   by hand (libFuzzer
#                                     adds its finds to the first directory: not the seeds)
# Seeds come from spec/fuzz/corpus/<name>/; what a run finds is kept in
# $(FUZZ_BUILD)/corpus/<name>/ and crashes in $(FUZZ_BUILD)/artifacts/<name>/.
FUZZ_SAN     = -fsanitize=address,undefined -fno-sanitize-recover=undefined \
               -fno-omit-frame-pointer
# clang's -Wcast-align warns on x86 too (Lua's extra space, the arena), and its
# -Wformat-nonliteral on vprintf-style wrappers; gcc's do not, and the code is the same.
FUZZ_CFLAGS  = $(filter-out $(OPT) $(SAN_FLAGS),$(CFLAGS_ALL)) $(FUZZ_OPT) $(FUZZ_SAN) \
               -Wno-cast-align -Wno-format-nonliteral
FUZZ_LUA_OBJS = $(LUA_CORE:%=$(FUZZ_BUILD)/lua-obj/%.o)
FUZZ_OBJS    = $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,$(notdir $(ENGINE_SRCS))) $(FUZZ_BUILD)/obj/embedded.o \
               $(patsubst engine/front/mcp/%.c,$(FUZZ_BUILD)/obj/mcp/%.o,$(MCP_SRCS)) \
               $(FUZZ_BUILD)/obj/options.o $(FUZZ_BUILD)/obj/audit_show.o
FUZZERS      = $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/%)

$(FUZZ_BUILD)/lua-obj/%.o: $(LUA_SRCDIR)/.tidepool-patched engine/core/lua_patch.h
	@mkdir -p $(@D)
	$(FUZZ_CC) -std=gnu99 $(FUZZ_OPT) $(LUA_DEFS) $(FUZZ_SAN) -fsanitize=fuzzer-no-link \
	  -include engine/core/lua_patch.h -c $(LUA_SRC)/$*.c -o $@

$(FUZZ_BUILD)/obj/%.o: %.c $(HEADERS) $(LUA_SRCDIR)/.tidepool-patched
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BUILD)/obj/mcp/%.o: engine/front/mcp/%.c $(HEADERS) $(LUA_SRCDIR)/.tidepool-patched
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Iengine/front -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_BUILD)/obj/embedded.o: $(GEN_SRCS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Wno-missing-prototypes -c $< -o $@

# Objects, not an archive: luv (a shared library) takes from the executable Lua functions
# that no engine object calls (luaL_openlibs), so all of Lua goes in.
$(FUZZ_BUILD)/fuzz_%: spec/fuzz/fuzz_%.c $(wildcard spec/fuzz/*.h) $(FUZZ_OBJS) $(FUZZ_LUA_OBJS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Ispec/fuzz -fsanitize=fuzzer -Wl,-E -o $@ $< $(FUZZ_OBJS) \
	  $(FUZZ_LUA_OBJS) $(LUV_LIBS) $(LIBS_ALL)

# the objects are kept, or every make test would rebuild them all (about a minute)
.SECONDARY: $(FUZZ_OBJS) $(FUZZ_LUA_OBJS)

fuzz-build: $(FUZZERS)

fuzz: fuzz-build
	@FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_ARGS='$(FUZZ_ARGS)' \
	  sh scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The man page: doc/tidepool.1.in with its option lists taken from the built command's
# --help (scripts/man.sh), and the tools' path from DATADIR.
MANPAGE = $(BUILD)/doc/tidepool.1
$(MANPAGE): doc/tidepool.1.in scripts/man.sh $(CLI) $(PATHS_STAMP)
	@mkdir -p $(@D)
	sh scripts/man.sh $(CLI) doc/tidepool.1.in $@ $(DATADIR)
man: $(MANPAGE)

install: all $(MANPAGE)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(INCDIR) \
	  $(DESTDIR)$(LUACMOD) $(DESTDIR)$(DATADIR)/tools $(DESTDIR)$(MANDIR)/man1 \
	  $(DESTDIR)$(LIBEXECDIR)
	install -m 755 $(CONFINE) $(DESTDIR)$(LIBEXECDIR)/tidepool-confine
	install -m 644 $(MANPAGE) $(DESTDIR)$(MANDIR)/man1/tidepool.1
	install -m 755 $(CLI) $(DESTDIR)$(BINDIR)/tidepool
	install -m 644 $(LIB_A) $(DESTDIR)$(LIBDIR)/libtidepool.a
	install -m 755 $(LIB_SO) $(DESTDIR)$(LIBDIR)/libtidepool.so.$(VERSION)
	ln -sf libtidepool.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libtidepool.so.0
	ln -sf libtidepool.so.0 $(DESTDIR)$(LIBDIR)/libtidepool.so
	install -m 644 engine/include/tidepool.h $(DESTDIR)$(INCDIR)/tidepool.h
	install -m 644 engine/include/tidepool_server.h $(DESTDIR)$(INCDIR)/tidepool_server.h
	install -m 644 $(PCFILE) $(DESTDIR)$(LIBDIR)/pkgconfig/tidepool.pc
	install -m 755 $(LUAMOD) $(DESTDIR)$(LUACMOD)/tidepool.so
	if ls tools/*.lua >/dev/null 2>&1; then install -m 644 tools/*.lua $(DESTDIR)$(DATADIR)/tools/; fi
	install -m 644 engine/host/config.schema.json $(DESTDIR)$(DATADIR)/config.schema.json

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/tidepool $(DESTDIR)$(LIBDIR)/libtidepool.a \
	  $(DESTDIR)$(LIBDIR)/libtidepool.so $(DESTDIR)$(LIBDIR)/libtidepool.so.0 \
	  $(DESTDIR)$(LIBDIR)/libtidepool.so.$(VERSION) $(DESTDIR)$(INCDIR)/tidepool.h \
	  $(DESTDIR)$(INCDIR)/tidepool_server.h \
	  $(DESTDIR)$(LIBDIR)/pkgconfig/tidepool.pc $(DESTDIR)$(LUACMOD)/tidepool.so
	rm -f $(DESTDIR)$(MANDIR)/man1/tidepool.1
	rm -rf $(DESTDIR)$(DATADIR) $(DESTDIR)$(LIBEXECDIR)

# The Debian package, $(BUILD)/tidepool_<version>-<rev>_<arch>.deb, checked by lintian
# (packaging/deb.sh; scripts/deps.sh deb installs lintian, needed only here).
deb:
	@sh scripts/deps.sh deb
	@BUILD=$(BUILD) MAKE='$(MAKE)' sh packaging/deb.sh

print-version:
	@echo $(VERSION)

clean:
	rm -rf $(BUILD)/obj $(BUILD)/gen $(BUILD)/tests $(BUILD)/bench $(BUILD)/lua-obj \
	  $(BUILD)/lua $(BUILD)/embed $(BUILD)/sanitize $(FUZZ_BUILD) $(LIB_A) $(LIB_SO) \
	  $(BUILD)/libtidepool.so.0 $(CLI) $(CONFINE) $(PCFILE) $(BUILD)/doc $(BUILD)/deb $(BUILD)/*.deb \
	  $(CONFIG_MK)
