# One-command entry points. Every target that builds first runs the idempotent bootstrap.
SHELL := /bin/bash
# librdkafka >= 2.2 lives in .deps/ when the system's is older (see deploy/local/bootstrap.sh).
export PKG_CONFIG_PATH := $(CURDIR)/.deps/lib/pkgconfig$(if $(PKG_CONFIG_PATH),:$(PKG_CONFIG_PATH))
ARGS ?=

.PHONY: bootstrap build release test test-unit demo bench chaos scale leaks fuzz clean k8s-rules

bootstrap:
	@bash deploy/local/bootstrap.sh

build: bootstrap
	swift build

release: bootstrap
	swift build -c release

# Starts the local broker and PostgreSQL, runs every test against them, stops them (what CI runs).
test: bootstrap
	@bash deploy/local/run-tests.sh

# Only the unit tests, those Tests/unit-tests.txt lists: no broker, no PostgreSQL, no child process; seconds once built.
# A listed test that needs a service or starts a process fails here (see docs/testing.md). ARGS go to `swift test`.
test-unit: bootstrap
	@bash deploy/local/run-unit-tests.sh $(ARGS)

demo: bootstrap
	@bash deploy/local/demo.sh $(ARGS)

# The pipeline's speed on the local broker and PostgreSQL (see README, "Benchmark", and docs/benchmarks.md).
bench: bootstrap
	@bash deploy/local/bench.sh $(ARGS)

# The pipeline under faults (workers killed, PostgreSQL down), then its invariants (see docs/reliability.md, "Chaos run").
chaos: bootstrap
	@bash deploy/local/chaos.sh $(ARGS)

# Replicas joining and leaving while purchases flow: 1 → 2 → 1 per stage (see docs/reliability.md, "Scaling out and in").
scale: bootstrap
	@bash deploy/local/scale.sh $(ARGS)

# A short pipeline run under LeakSanitizer (see docs/reliability.md).
leaks: bootstrap
	@bash deploy/local/leaks.sh $(ARGS)

# Hostile inputs against every stage and HTTP route for a while, seeded (see docs/testing.md, "Hostile inputs").
fuzz: bootstrap
	@bash deploy/local/fuzz.sh $(ARGS)

clean:
	rm -rf .build

# deploy/k8s/prometheus-rule.yaml from deploy/prometheus/alerts.yaml (a test checks that it is up to date).
k8s-rules:
	@bash deploy/prometheus/k8s-rules.sh > deploy/k8s/prometheus-rule.yaml
