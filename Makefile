# Switchboard: `make run` starts the embedded server, `make test` runs every test.
# Both install what they need on a fresh machine.
SHELL := /bin/bash
NODE := node --import tsx
# The end-to-end and chaos files take longest: listed first, they start first.
TEST_SPEC := "test/e2e/**/*.test.ts" "test/chaos/**/*.test.ts" "services/*/test/**/*.test.ts"
# Test files run side by side, each in a process of its own (most of a test's time is waiting
# for timers, sockets and other processes); every suite makes its own database and NATS streams.
# One more than the cores, at most 3: all of them share PostgreSQL's 100 connections (up to 57
# seen in use with 3).
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); echo $$(( n + 1 < 3 ? n + 1 : 3 )))

.PHONY: run build test lint typecheck bench chaos install system-deps services

node_modules/.installed: package.json package-lock.json services/*/package.json
	@echo "==> installing npm packages (npm ci)"
	npm ci --no-audit --no-fund
	@touch $@

install: node_modules/.installed

## Tools tests need from Debian: ffmpeg/ffprobe (voice notes), chromium (dashboard e2e).
system-deps:
	@missing=""; \
	command -v ffprobe >/dev/null || missing="$$missing ffmpeg"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  echo "==> installing system packages:$$missing"; \
	  sudo=""; [ "$$(id -u)" = 0 ] || sudo="sudo"; \
	  ($$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq $$missing >/dev/null) \
	    || echo "warning: could not install$$missing; tests that need them will fail"; \
	fi

## PostgreSQL and NATS run on every dev/CI machine; start them if they are down.
services:
	@scripts/ensure-services.sh

## dist/<process>.mjs, what production runs (scripts/build.ts): no TypeScript loader at run time.
build: install
	@$(NODE) scripts/build.ts

run: build
	@node dist/server.mjs

typecheck: install
	npx tsc -p tsconfig.json

lint: install
	npx eslint .
	npx tsc -p tsconfig.json

test: install system-deps services
	@echo "==> type-check"
	npx tsc -p tsconfig.json
	@echo "==> tests ($(TEST_JOBS) files at a time; each file's results print when it ends)"
	NODE_EXTRA_CA_CERTS=$(CURDIR)/test/fixtures/tls/ca.pem npx mocha --parallel --jobs $(TEST_JOBS) $(TEST_SPEC)

bench: install services
	@$(NODE) test/bench/run.ts

chaos: install services
	CHAOS_LONG=1 npx mocha test/chaos/**/*.test.ts
