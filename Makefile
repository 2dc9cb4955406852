# kvreplay: plain GNU Makefile.
#   make          build/kvreplay
#   make test     build and run every tests/test_*.c (cmocka), then the real clients (quick) when npm is
#                 reachable; installs the Debian packages first when a library is missing (.ci/deps,
#                 as root), else stops naming that command
#   make test-clients  the real clients in full (a scripted Claude Code session included)
#   make test-serve-soak  serve's 1,000-request RSS soak and its 200 requests under ASan
#   make asan     the tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   make fuzz     libFuzzer targets (tests/fuzz/) with clang, ASan + UBSan, FUZZ_S seconds each (default 60)
#   make bench    engine and checkpoint benchmarks (figures, not tests)
#   make demo     install missing packages (as root), run the experiments, plots, REPORT.md
#   make plots    render results/*.sqlite with gnuplot
#   make test-slurm  a single-node Slurm (installed as root) runs a 4-shard experiment and its merge
#
# Numerics: -ffp-contract=off always; never -ffast-math or -Ofast (bit-exactness).

CC      ?= cc
BUILD   ?= build
OPT     ?= -O2 -march=native
SAN     ?=
OMP     ?= -fopenmp
PKGS    := openblas gsl sqlite3 jansson libxxhash libpcre2-32 libmicrohttpd libcurl
# The harness is every .c below harness/, in any sub-folder (no list to keep);
# every harness folder is on the include path, so a header is included by its name.
ENGINE_SRC  := $(wildcard engine/*.c engine/layers/*.c)
HARNESS_DIRS := $(shell find harness -type d | LC_ALL=C sort)
HARNESS_SRC := $(filter-out harness/cli/main.c,$(shell find harness -name '*.c' | LC_ALL=C sort))
CFLAGS  := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Wshadow -Werror=implicit-function-declaration \
           -ffp-contract=off -fno-fast-math $(OMP) -g $(OPT) $(SAN) \
           -Iengine -Iengine/layers $(addprefix -I,$(HARNESS_DIRS)) -Itests/helpers -MMD -MP $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS  := $(filter-out -lgslcblas,$(shell pkg-config --libs $(PKGS) 2>/dev/null)) -lm -lpthread
TESTLIBS := $(shell pkg-config --libs cmocka 2>/dev/null)

# The revision is compiled into harness/base/version.c alone, which is rebuilt
# when $(BUILD)/git-rev changes, i.e. whenever HEAD moves (runs.git_rev).
GIT_REV := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
REV_STAMP := $(BUILD)/git-rev
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(REV_STAMP) 2>/dev/null)" = "$(GIT_REV)" ] || echo "$(GIT_REV)" > $(REV_STAMP); })

LIB_OBJ     := $(patsubst %.c,$(BUILD)/obj/%.o,$(ENGINE_SRC) $(HARNESS_SRC))
TEST_SRC    := $(wildcard tests/test_*.c)
TEST_BIN    := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
TEST_HELP   := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tests/helpers/*.c))

.PHONY: all test test-run test-clients test-serve-soak test-slurm asan fuzz fuzz-seeds bench demo plots clean deps
.SECONDARY:
all: $(BUILD)/kvreplay

$(BUILD)/obj/harness/base/version.o: $(REV_STAMP)
$(BUILD)/obj/harness/base/version.o: CFLAGS += -DKVR_GIT_REV=\"$(GIT_REV)\"

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libkvreplay.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/kvreplay: $(BUILD)/obj/harness/cli/main.o $(BUILD)/libkvreplay.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_HELP) $(BUILD)/libkvreplay.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $(filter %.o,$^) $(filter %.a,$^) $(LDLIBS) $(TESTLIBS)

# The fuzz targets, replayed over their kept inputs by the normal test build.
$(BUILD)/tests/test_fuzz_corpus: $(BUILD)/obj/tests/fuzz/targets.o

# The test runner needs the CLI too (integration tests call build/kvreplay).
# On a fresh machine the libraries may be missing: .ci/deps installs them
# (as root) or stops with one line naming itself; the build then runs in a
# new make, which reads pkg-config's flags again.
test:
	@{ pkg-config --exists $(PKGS) cmocka && command -v parallel; } >/dev/null 2>&1 || sh .ci/deps
	@$(MAKE) --no-print-directory test-run

# test-run's last step: the real clients (tests/clients/run.sh --quick: the openai,
# Anthropic and Google GenAI SDKs, curl, Claude Code, Qwen Code, Codex and the Gemini
# CLI at their pinned versions against kvreplay serve) when npm is reachable,
# time-boxed; it skips with one message otherwise.
test-run: $(BUILD)/kvreplay $(TEST_BIN)
	@BUILD=$(BUILD) sh tests/run.sh $(TEST_BIN)
	@KVR_SKIP_CLIENTS=$(KVR_SKIP_CLIENTS) timeout 600 sh tests/clients/run.sh $(BUILD)/kvreplay --quick || { echo "test-clients: failed or timed out" >&2; exit 1; }

# The real clients in full: the above, the current version of each agent, and
# scripted Claude Code, Codex and Gemini CLI sessions, recorded, verified and
# replayed (several minutes; docs/serve.md, section 9).
test-clients: $(BUILD)/kvreplay
	@sh tests/clients/run.sh $(BUILD)/kvreplay

# serve's long runs: 1,000 requests (RSS after 1,000 <= 1.1x RSS after 100)
# and 200 requests under AddressSanitizer (leaks), docs/serve.md.
test-serve-soak: $(BUILD)/kvreplay
	@sh tests/serve_soak.sh $(BUILD)/kvreplay

# Not part of `make test`: installs slurm-wlm and munge (as root) and starts their daemons.
test-slurm: $(BUILD)/kvreplay
	@sh tests/slurm/run.sh

asan:
	$(MAKE) BUILD=build-asan OPT="-O1" SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" KVR_SKIP_CLIENTS=1 test

# Fuzzing (tests/fuzz/README.md): clang's libFuzzer with ASan + UBSan, one
# binary for every target; new inputs go to build-fuzz/corpus/, crashes to
# tests/fuzz/crashes/TARGET/ (commit them: `make test` replays them).
FUZZ_S   ?= 60
FUZZ_SAN := -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
fuzz:
	@sh .ci/deps fuzz
	@$(MAKE) --no-print-directory BUILD=build-fuzz CC=clang OMP=-fopenmp-simd OPT="-O1 -march=native" SAN="$(FUZZ_SAN)" build-fuzz/kvr-fuzz
	@sh tests/fuzz/run.sh build-fuzz/kvr-fuzz $(FUZZ_S) $(FUZZ_TARGETS)

$(BUILD)/kvr-fuzz: $(BUILD)/obj/tests/fuzz/libfuzzer.o $(BUILD)/obj/tests/fuzz/targets.o $(BUILD)/libkvreplay.a
	$(CC) $(CFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

# Rewrites the seed corpora (deterministic; tests/fuzz/seeds.c says what each is).
fuzz-seeds: $(BUILD)/fuzz-seeds
	$(BUILD)/fuzz-seeds tests/fuzz/corpus

$(BUILD)/fuzz-seeds: $(BUILD)/obj/tests/fuzz/seeds.o $(BUILD)/obj/tests/fuzz/targets.o $(BUILD)/libkvreplay.a
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

bench: $(BUILD)/kvreplay
	@sh experiments/bench.sh $(BUILD)/kvreplay

deps:
	@sh .ci/deps

demo: deps
	@$(MAKE) --no-print-directory $(BUILD)/kvreplay
	@sh experiments/demo.sh $(BUILD)/kvreplay $(SCALE)

plots:
	@sh plots/render.sh

clean:
	rm -rf build build-asan build-fuzz

-include $(shell find $(BUILD) build-asan build-fuzz -name '*.d' 2>/dev/null)
