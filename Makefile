# Targets a newcomer needs. The test command is scripts/test (the README's).
# `make` alone lists them (make help): each target's ## comment is its line.
.PHONY: help test matrix clusters lint bench run fuzz mutate
.DEFAULT_GOAL := help

help: ## this list
	@awk -F ':.*## ' '/^[a-z][a-z-]*:.*## / { printf "  %-10s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

test: ## all tests with -race; builds stand-in database images if no registry
	./scripts/test

matrix: ## the backend tests on PostgreSQL 15, 17, 18, MariaDB 10.11, 11.8 and MySQL 9.7 (stand-ins built when missing)
	./scripts/matrix

clusters: ## the Galera, PostgreSQL failover, PgBouncer, Patroni, Group Replication and Vitess suites alone (part of ./scripts/test too)
	./scripts/test ./integration/galera/ ./integration/pgfailover/ ./integration/pgbouncer/ ./integration/patroni/ ./integration/grouprepl/ ./integration/vitess/

lint: ## gofmt, go vet and golangci-lint (.golangci.yml) on every module, the layering check
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	go vet $$(scripts/packages)
	scripts/lint
	scripts/check-layering

bench: ## core micro-benchmarks, then the per-backend comparison
	go test -run '^$$' -bench . -benchmem .
	go run ./cmd/idem-bench

run: ## the orders example on embedded SQLite, on 127.0.0.1:8080
	go run ./examples/orders

fuzz: ## each fuzz target for 300,000 executions (a count: see .ci/run)
	for t in $$(go test -list '^Fuzz' ./idemhttp/ | grep '^Fuzz'); do go test -run '^$$' -fuzz "^$$t$$" -fuzztime 300000x ./idemhttp/ || exit 1; done

mutate: ## the mutation pass: each mutant in scripts/mutate/mutants.txt must fail its tests (a few minutes)
	go run ./scripts/mutate
