# kvtools - one non-recursive Makefile.  `make help` lists the targets.
PREFIX  ?= /usr/local
BINDIR  ?= $(PREFIX)/bin
MANDIR  ?= $(PREFIX)/share/man
CC      ?= cc
CFLAGS  ?= -O2 -g
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wformat=2 -Wvla
ifeq ($(WERROR),1)
WARN    += -Werror
endif
BUILD   ?= build
FUZZ_SECONDS ?= 60
# V=1: the whole compiler and linker command lines, and make check's whole
# output on the terminal.  Otherwise one short line per step ('CC file',
# 'AR lib', 'LD program') and, from make check, one line per test file.
V       ?= 0
ifeq ($(V),1)
Q       :=
say     := @:
quiet_to =
else
Q       := @
say     := @printf '  %-4s %s\n'
# $(call quiet_to,LOG): a chatty step's output goes to LOG, shown on failure
quiet_to = >$(1) 2>&1 || { cat $(1); exit 1; }
endif
ARGTABLE ?= -largtable2

# make [check] CROSS_COMPILE=aarch64-linux-gnu-: build with the cross
# compiler into build/aarch64-linux-gnu and run the tests under qemu-user
# (sh scripts/setup --arm64 installs both).  argtable2's arm64 library comes
# from a build-local sysroot (scripts/cross-sysroot).  The whole suite
# runs there, at full scale.
ifneq ($(CROSS_COMPILE),)
TRIPLE  := $(CROSS_COMPILE:%-=%)
CC      := $(CROSS_COMPILE)gcc
AR      := $(CROSS_COMPILE)ar
BUILD   := build/$(TRIPLE)
SYSROOT := $(BUILD)/sysroot
ARGTABLE := $(SYSROOT)/usr/lib/$(TRIPLE)/libargtable2.a
ARGTABLE_DEP := $(ARGTABLE)
QEMU    ?= qemu-$(firstword $(subst -, ,$(TRIPLE)))
QEMU_CPU ?= max
# The programs run under the arm64 loader and C library of the multiarch
# packages (libc6:arm64, which the :arm64 libraries pull in), never with
# -L /usr/$(TRIPLE): that loader is the cross toolchain's, of another glibc
# build than the libc.so.6 the loader cache names, and the pair hangs in the
# first pthread_create.
KV_RUNNER := $(QEMU) -cpu $(QEMU_CPU)
endif

# `make asan check`, `make ubsan check`: rebuild in their own tree, rerun.
ifneq ($(filter asan,$(MAKECMDGOALS)),)
BUILD   := build/asan
CFLAGS  += -O1 -fsanitize=address -fno-omit-frame-pointer
LDFLAGS += -fsanitize=address
export ASAN_OPTIONS := detect_leaks=1:abort_on_error=1
endif
ifneq ($(filter ubsan,$(MAKECMDGOALS)),)
BUILD   := build/ubsan
CFLAGS  += -O1 -fsanitize=undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
LDFLAGS += -fsanitize=undefined
export UBSAN_OPTIONS := print_stacktrace=1:halt_on_error=1
endif

CPPFLAGS += -Ilib -D_GNU_SOURCE
ALL_CFLAGS = -std=c11 $(WARN) $(CFLAGS) -pthread
LDLIBS  += -lxxhash -lnettle $(ARGTABLE) -lsqlite3 -lhiredis -ljansson -ldl -lm -pthread

LIB_SRC   := $(sort $(wildcard lib/*/*.c))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
LIBKV     := $(BUILD)/libkv.a
# A program is one file, tools/NAME.c, or all of a folder, tools/NAME/*.c.
TOOL_SRC  := $(sort $(wildcard tools/kv*.c tools/kv*/*.c))
TOOLS     := $(sort $(notdir $(basename $(wildcard tools/kv*.c)) \
               $(patsubst %/,%,$(dir $(wildcard tools/kv*/*.c)))))
tool_obj   = $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/$(1).c tools/$(1)/*.c))
TOOL_BIN  := $(TOOLS:%=$(BUILD)/bin/%)
UNIT_SRC  := $(sort $(wildcard tests/unit/*.c))
UNIT_BIN  := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
MAN1      := $(sort $(wildcard man/*.1))
MAN_ALL   := $(sort $(wildcard man/*.[157]))

.SECONDARY:
.PHONY: FORCE all check crosscheck bench examples demo install uninstall asan ubsan fuzz clean help golden lint-man
all: $(TOOL_BIN) $(UNIT_BIN)

# The compile line of a tree, kept in a file that changes only when the
# line does: every object depends on it, so an object is never older than
# the flags asked for (WERROR=1 after a build without it recompiles).
COMPILE_LINE := $(CC) $(CPPFLAGS) $(ALL_CFLAGS)
FLAGS_STAMP  := $(BUILD)/compile-flags
$(FLAGS_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(COMPILE_LINE)' | cmp -s - $@ || echo '$(COMPILE_LINE)' >$@
FORCE:

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(say) CC $<
	$(Q)$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

$(LIBKV): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(say) AR $@
	$(Q)rm -f $@ && $(AR) rcs $@ $^

.SECONDEXPANSION:
$(BUILD)/bin/%: $$(call tool_obj,$$*) $(LIBKV) | $(ARGTABLE_DEP)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(LIBKV) | $(ARGTABLE_DEP)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

ifneq ($(CROSS_COMPILE),)
$(ARGTABLE):
	$(say) GEN $(SYSROOT)
	$(Q)sh scripts/cross-sysroot $(TRIPLE) $(SYSROOT)

# The tests call the programs by name: under emulation, through wrappers.
RUN_DIR := $(BUILD)/run
$(RUN_DIR)/%: $(BUILD)/bin/%
	@mkdir -p $(dir $@)
	@printf '#!/bin/sh\nexec $(KV_RUNNER) %s "$$@"\n' '$(abspath $<)' >$@ && chmod +x $@
CHECK_BIN := $(TOOLS:%=$(RUN_DIR)/%)
else
RUN_DIR := $(BUILD)/bin
CHECK_BIN :=
endif

# make check [TESTS='tests/cli/kvmask*.sh'] [V=1]: unit, cli and man-page
# tests.  The whole output goes to $(BUILD)/check.log; the terminal gets a
# line per test file, the failures again at the end with the command that
# reruns each, and one closing line 'N passed, N failed' (V=1: everything).
TESTS ?=
CHECK_LOG := $(BUILD)/check.log
CHECK_AGAIN := make$(if $(filter asan,$(MAKECMDGOALS)), asan)$(if $(filter ubsan,$(MAKECMDGOALS)), ubsan) check$(if $(CROSS_COMPILE), CROSS_COMPILE=$(CROSS_COMPILE))$(if $(filter command line,$(origin BUILD)), BUILD=$(BUILD))
check: all $(CHECK_BIN)
	@KV_BIN=$(abspath $(RUN_DIR)) KV_UNIT=$(abspath $(BUILD)/tests) \
	  KV_RUNNER='$(KV_RUNNER)' KV_LOG=$(abspath $(CHECK_LOG)) KV_VERBOSE=$(V) \
	  KV_CC='$(CC)' KV_LINK='$(ALL_CFLAGS) $(LDFLAGS)' KV_LDLIBS='$(abspath $(LIBKV)) $(LDLIBS)' \
	  KV_AGAIN='$(CHECK_AGAIN)' KV_TOP=$(CURDIR) sh tests/run.sh $(TESTS)

lint-man:
	@for m in $(MAN_ALL); do mandoc -Tlint -W warning $$m || exit 1; done

# Refresh golden files; review the diff before committing.
golden: all
	@KV_BIN=$(abspath $(BUILD)/bin) KV_TOP=$(CURDIR) KV_GOLDEN_UPDATE=1 \
	  KV_LOG=$(abspath $(BUILD)/golden.log) KV_VERBOSE=$(V) sh tests/run.sh $(TESTS)

# make crosscheck [CROSSCHECK='kvslot-plan kvmask']: kvtools against the
# upstream releases' own code, installed at pinned versions into one
# environment, build/pyenv/crosscheck (needs the Python package index the
# first time; not part of make check).  The parts are scripts/crosscheck/*.sh.
CROSSCHECK ?=
# the first run's cost, as measured on the 2-core machine (README)
CROSSCHECK_DISK  := 6 GB
CROSSCHECK_SETUP := 3 to 12 minutes
CROSSCHECK_TIME  := 20 minutes
CROSSCHECK_PARTS := $(sort $(filter-out run,$(basename $(notdir $(wildcard scripts/crosscheck/*.sh)))))
crosscheck: all
	@KV_BIN=$(abspath $(BUILD)/bin) KV_TOP=$(CURDIR) sh scripts/crosscheck/run.sh $(CROSSCHECK)

# bench/xattn_call and bench/slot_call time kvxattn's and kvslot map's
# library calls in one process, the way their peers are timed
# (bench/bench-kvxattn.sh, bench/bench-kvslot-map.sh)
BENCH_CALLS := $(BUILD)/bench/xattn_call $(BUILD)/bench/slot_call
$(BENCH_CALLS): %: %.o $(LIBKV) | $(ARGTABLE_DEP)
	@mkdir -p $(dir $@)
	$(say) LD $@
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

bench: all $(BENCH_CALLS)
	@KV_BIN=$(abspath $(BUILD)/bin) KV_CALL=$(abspath $(BUILD)/bench/xattn_call) \
	  KV_SLOT_CALL=$(abspath $(BUILD)/bench/slot_call) \
	  KV_TOP=$(CURDIR) sh bench/run.sh $(BENCH)

examples: all
	@for d in examples/*/; do [ -f $$d/Makefile ] || continue; \
	  echo "== $$d"; $(MAKE) -C $$d KV_BIN=$(abspath $(BUILD)/bin) || exit 1; done

demo: all
	@KV_BIN=$(abspath $(BUILD)/bin) sh examples/demo.sh

install: $(TOOL_BIN)
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(MANDIR)/man7
	install -m 755 $(TOOL_BIN) $(DESTDIR)$(BINDIR)
	for m in $(MAN_ALL); do s=$${m##*.}; install -m 644 $$m $(DESTDIR)$(MANDIR)/man$$s; done

uninstall:
	for t in $(TOOLS); do rm -f $(DESTDIR)$(BINDIR)/$$t; done
	for m in $(MAN_ALL); do s=$${m##*.}; rm -f $(DESTDIR)$(MANDIR)/man$$s/$${m##*/}; done

asan ubsan:
	@:

# make fuzz [FUZZ_SECONDS=60]: libFuzzer (clang) on the .npy reader, the
# config.json reader, the segment lists of kvslot plan --chunk-cache, and
# the integer tables, split listings and sim traces (Mooncake's too), the
# store URLs, and the streamed
# reader of Redis GET replies (each for FUZZ_SECONDS).  Undefined behaviour
# stops a target like a crash and leaves its input behind.
FUZZ_CC = clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	  -Ilib -D_GNU_SOURCE
# the chunk store's sources and libraries, for the store URL and GET-reply targets
FUZZ_STORE = lib/chunk/store.c lib/chunk/store_dir.c lib/chunk/store_dir_fsck.c \
	  lib/chunk/store_redis.c lib/chunk/store_redis_resp.c lib/chunk/store_cluster.c \
	  lib/chunk/blob.c lib/chunk/chunk.c \
	  lib/chunk/rope.c lib/chunk/rope_move.c lib/core/*.c -lhiredis -lsqlite3 -lxxhash -largtable2 -ldl -lm -lpthread
fuzz:
	@command -v clang >/dev/null || { echo 'make fuzz needs clang (apt-get install clang)'; exit 1; }
	@mkdir -p build/fuzz/corpus build/fuzz/model-corpus
	$(FUZZ_CC) -o build/fuzz/npy tests/fuzz/npy.c lib/core/npy.c lib/core/tensor.c lib/core/err.c lib/core/half.c lib/core/isa.c
	cp tests/fuzz/corpus/* build/fuzz/corpus/
	build/fuzz/npy -max_total_time=$(FUZZ_SECONDS) -max_len=4096 build/fuzz/corpus
	$(FUZZ_CC) -o build/fuzz/model tests/fuzz/model.c lib/chunk/model.c lib/chunk/rope.c lib/chunk/rope_move.c \
	  lib/core/tensor.c lib/core/err.c lib/core/half.c lib/core/isa.c -ljansson -lm
	cp tests/configs/*.json tests/configs/bad/*.json build/fuzz/model-corpus/
	build/fuzz/model -max_total_time=$(FUZZ_SECONDS) -max_len=4096 build/fuzz/model-corpus
	$(FUZZ_CC) -o build/fuzz/segments tests/fuzz/segments.c lib/slot/ccplan.c lib/core/err.c
	@mkdir -p build/fuzz/segments-corpus
	cp tests/fuzz/segments-corpus/* build/fuzz/segments-corpus/
	build/fuzz/segments -max_total_time=$(FUZZ_SECONDS) -max_len=2048 build/fuzz/segments-corpus
	$(FUZZ_CC) -o build/fuzz/tables tests/fuzz/tables.c lib/core/cli.c lib/core/out.c lib/core/npy.c \
	  lib/core/tensor.c lib/core/err.c lib/core/half.c lib/core/isa.c lib/sim/*.c \
	  -largtable2 -ljansson -lm -lpthread
	@mkdir -p build/fuzz/tables-corpus
	cp tests/fuzz/tables-corpus/* build/fuzz/tables-corpus/
	build/fuzz/tables -max_total_time=$(FUZZ_SECONDS) -max_len=2048 build/fuzz/tables-corpus
	$(FUZZ_CC) -o build/fuzz/storeurl tests/fuzz/storeurl.c $(FUZZ_STORE)
	@mkdir -p build/fuzz/storeurl-corpus
	cp tests/fuzz/storeurl-corpus/* build/fuzz/storeurl-corpus/
	build/fuzz/storeurl -max_total_time=$(FUZZ_SECONDS) -max_len=512 build/fuzz/storeurl-corpus
	$(FUZZ_CC) -o build/fuzz/resp tests/fuzz/resp.c $(FUZZ_STORE)
	@mkdir -p build/fuzz/resp-corpus
	cp tests/fuzz/resp-corpus/* build/fuzz/resp-corpus/
	build/fuzz/resp -max_total_time=$(FUZZ_SECONDS) -max_len=16384 build/fuzz/resp-corpus

clean:
	rm -rf build

help:
	@echo 'targets:'
	@echo '  all        build the programs into $(BUILD)/bin (default)'
	@echo '  check      unit, cli, conformance and man-page tests (TESTS=... to pick)'
	@echo '  asan check / ubsan check   the same under a sanitizer'
	@echo '  crosscheck kvtools against the upstream releases (vLLM, transformers, torch) (CROSSCHECK=... to pick)'
	@echo '$(CROSSCHECK_PARTS)' | fold -s -w 64 | sed 's/^/             /'
	@echo '             the first run installs build/pyenv/crosscheck from the Python package'
	@echo '             index: about $(CROSSCHECK_DISK) of disk and $(CROSSCHECK_SETUP) (then cached);'
	@echo '             the parts then take about $(CROSSCHECK_TIME) on two cores'
	@echo '  bench      side-by-side benchmarks against the peers (BENCH=... to pick)'
	@echo '  examples   run the make-driven experiments in examples/'
	@echo '  demo       a pipeline through every program'
	@echo '  fuzz       fuzz the parsers (.npy, config.json, segment lists, tables, store URLs, Redis replies), FUZZ_SECONDS each (default 60)'
	@echo '  golden     refresh golden files (review the diff)'
	@echo '  install / uninstall   PREFIX=$(PREFIX) DESTDIR=$(DESTDIR)'
	@echo '             (programs, man pages, libkv .so/.a, include/kvtools/, kvtools.pc)'
	@echo '  python     build the kvtools Python package in place (python/; PYTHON=$(PYTHON))'
	@echo '  check-python-full   the Python tests alone (every function on 1,000 random cases, as in check)'
	@echo '  clean      remove build/'
	@echo 'variables:'
	@echo '  CROSS_COMPILE=aarch64-linux-gnu-   build for aarch64, run check under qemu-user'
	@echo '                                     (sh scripts/setup --arm64 installs what it needs)'
	@echo '  KVTOOLS_ISA=generic|avx2|...       cap the vector code (man 7 kvtools)'
	@echo '  WERROR=1   warnings are errors'
	@echo '  V=1        whole command lines, and make check'"'"'s whole output (else in $(BUILD)/check.log)'

# make python: the kvtools Python package (python/), built in place against
# libkv compiled with -fPIC (also the objects of the shared library that
# make install installs).  PYTHON is Debian's python3 where there is one.
PYTHON    ?= $(firstword $(wildcard /usr/bin/python3) python3)
PIC_OBJ   := $(LIB_SRC:%.c=$(BUILD)/pic/%.o)
LIBKV_PIC := $(BUILD)/pic/libkv.a
LIBKV_SO  := $(BUILD)/pic/libkv.so.0
$(BUILD)/pic/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(say) CC '$< (-fPIC)'
	$(Q)$(CC) $(CPPFLAGS) $(ALL_CFLAGS) -fPIC -MMD -MP -c -o $@ $<
$(LIBKV_PIC): $(PIC_OBJ)
	$(say) AR $@
	$(Q)rm -f $@ && $(AR) rcs $@ $^
$(LIBKV_SO): $(PIC_OBJ)
	$(say) LD $@
	$(Q)$(CC) $(ALL_CFLAGS) $(LDFLAGS) -shared -Wl,-soname,libkv.so.0 -o $@ $^ \
	  -lxxhash -lnettle -largtable2 -lsqlite3 -lhiredis -ljansson -ldl -lm -pthread
$(BUILD)/python/built: $(LIBKV_PIC) python/kvtools_build.py python/cdef/*.h python/setup.py
	@mkdir -p $(dir $@)
	$(say) PY python/kvtools
	$(Q)cd python && KVTOOLS_LIBKV=$(abspath $(LIBKV_PIC)) $(PYTHON) setup.py -q \
	  build_ext --inplace --force --build-temp $(abspath $(BUILD)/python) \
	  $(call quiet_to,$(abspath $(BUILD)/python/build.log))
	@touch $@
.PHONY: python install-lib
python: $(BUILD)/python/built
# make check runs the Python package's tests (tests/cli/python.sh) on a
# native build; sanitizer and cross builds leave them out.
ifeq ($(CROSS_COMPILE)$(filter asan ubsan,$(MAKECMDGOALS)),)
check: python
endif
# make check-python-full: the Python tests alone, every function on
# KVTOOLS_CASES (1,000) random cases, as make check runs them
.PHONY: check-python-full
check-python-full: python
	@$(MAKE) --no-print-directory check TESTS=tests/cli/python.sh
# bench/bench-python.sh times the package beside the C library
bench: python
# make clean also removes what make python and pip leave in python/
.PHONY: clean-python
clean: clean-python
clean-python:
	rm -rf python/kvtools/_kv*.so python/build python/kvtools.egg-info

# make install also installs libkv for C programs: shared and static
# library, the public headers under include/kvtools/, kvtools.pc, libkv(3).
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
PCDIR   ?= $(LIBDIR)/pkgconfig
KV_HEADERS := $(filter-out %_int.h %_impl.h %/internal.h %_kern.h %_x86.h %/attn_row.h,\
	      $(sort $(wildcard lib/*/*.h)))
install: install-lib
install-lib: $(LIBKV) $(LIBKV_SO)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PCDIR) $(DESTDIR)$(MANDIR)/man3
	install -m 644 $(LIBKV) $(DESTDIR)$(LIBDIR)/libkv.a
	install -m 755 $(LIBKV_SO) $(DESTDIR)$(LIBDIR)/libkv.so.0
	ln -sf libkv.so.0 $(DESTDIR)$(LIBDIR)/libkv.so
	for h in $(KV_HEADERS); do d=$(DESTDIR)$(INCDIR)/kvtools/$$(dirname $${h#lib/}); \
	  install -d $$d && install -m 644 $$h $$d; done
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCDIR@|$(INCDIR)|' \
	  -e 's|@VERSION@|'"$$(sed -n 's/^#define KV_VERSION "\(.*\)"/\1/p' lib/core/kv.h)"'|' \
	  lib/kvtools.pc.in >$(DESTDIR)$(PCDIR)/kvtools.pc
	install -m 644 man/libkv.3 $(DESTDIR)$(MANDIR)/man3
uninstall: uninstall-lib
uninstall-lib:
	rm -f $(DESTDIR)$(LIBDIR)/libkv.a $(DESTDIR)$(LIBDIR)/libkv.so $(DESTDIR)$(LIBDIR)/libkv.so.0
	rm -rf $(DESTDIR)$(INCDIR)/kvtools
	rm -f $(DESTDIR)$(PCDIR)/kvtools.pc $(DESTDIR)$(MANDIR)/man3/libkv.3

-include $(PIC_OBJ:.o=.d)
-include $(LIB_OBJ:.o=.d) $(TOOL_SRC:%.c=$(BUILD)/%.d) $(UNIT_SRC:%.c=$(BUILD)/%.d)
