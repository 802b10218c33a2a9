# Operator and developer interface of the gateway. `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help
NODE ?= node
APT_PACKAGES := redis-server librdkafka-dev gcc chromium ffmpeg nginx supervisor python3-requests-oauthlib python3-tweepy
CLI := $(NODE) dist/services/cli.js

.PHONY: nginx-conf types types-check schema-types-check readme help deps deps-npm deps-system build run test test-only lint walls typecheck bench bench-distributed up down status topics lag \
        app app-caps user account webhooks replay publish deliveries resend clean config-doc console console-link

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 14

node_modules/.installed: package.json package-lock.json
	@echo "==> installing npm packages (npm ci)"
	@npm ci --no-audit --no-fund --loglevel=error
	@touch $@

deps-npm: node_modules/.installed

deps-system: ## install redis-server, librdkafka-dev, gcc, chromium, ffmpeg, nginx, supervisor and the Python clients of the conformance suite (python3-requests-oauthlib, python3-tweepy) with apt-get when absent
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "==> installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	else echo "==> Debian packages present: $(APT_PACKAGES)"; fi

deps: deps-npm deps-system

# dist/ is rebuilt whole: a module moved into a folder of the same name (services/webhooks/delivery.ts ->
# delivery/) would otherwise be shadowed by its stale compiled file, which require() resolves first.
build: deps-npm ## compile TypeScript to dist/
	@echo "==> building"
	@rm -rf dist
	@npx tsc -p tsconfig.build.json

run: build ## the gateway on the embedded default (all services, one process, no Kafka/Redis)
	@$(NODE) dist/services/embedded/main.js

lint: deps-npm ## eslint, then the walls between services (make walls)
	@echo "==> lint"
	@npx eslint --max-warnings=0 .
	@$(MAKE) --no-print-directory walls

walls: ## dependency-cruiser (.dependency-cruiser.mjs): a service imports only itself and services/common; no import circles in services/
	@echo "==> walls (dependency-cruiser)"
	@npx depcruise --config .dependency-cruiser.mjs --output-type err services

types-check: build
	@$(MAKE) --no-print-directory schema-types-check

schema-types-check:
	@echo "==> schema types up to date"
	@$(NODE) dist/scripts/gen-types.js --check

typecheck: deps-npm ## tsc --noEmit over sources, tests and benchmarks
	@echo "==> typecheck"
	@npx tsc -p tsconfig.json --noEmit

# The checks after the build are independent single-threaded jobs: run side by side (output kept per target).
test: deps build ## install what is missing, build, lint, typecheck, run every test
	@$(MAKE) --no-print-directory -j3 --output-sync=target lint typecheck schema-types-check
	@$(MAKE) --no-print-directory test-only

test-only: ## run the tap suite (real Redis and Kafka mock cluster started by test/support)
	@bash scripts/run-tests.sh

bench: build deps-system ## run every benchmark (bench-distributed's included); writes bench/RESULTS.md
	@bash scripts/run-bench.sh

bench-distributed: build deps-system ## make up vs embedded at fixed rates [BENCH_RATES=1000,2000,5000,10000 BENCH_SECONDS=20]; rewrites its section of bench/RESULTS.md
	@BENCH_ONLY=distributed BENCH_MERGE=1 bash scripts/run-bench.sh

bench-faults: build deps-system ## recovery and overload figures: kill -9 of six instances under make up at FAULT_RATE (2000/s) beside a run without faults (timeline per kill and per second), then 3x and 10x the webhook's capacity embedded and under make up [FAULT_PARTS=recovery,overload]
	@BENCH_ONLY=faults BENCH_MERGE=1 bash scripts/run-bench.sh

up: build deps-system ## distributed on this machine: Redis (REDIS=cluster: a 6-node Redis Cluster), Kafka mock cluster, supervisord running nginx and each instance [GATEWAY=2 WEBHOOKS=2 ACTIVITY=2 STREAM=2 ACCOUNT_HISTORY=2]
	@$(NODE) dist/scripts/up.js up

down: ## stop exactly the processes `make up` started (nginx and supervisord included)
	@$(NODE) dist/scripts/up.js down

status: ## each process of `make up`: pid, port, supervisor state, restarts, /healthz, /readyz
	@$(NODE) dist/scripts/up.js status

topics: build ## topics of deploy/topics.json, checked on the cluster (make up's or KAFKA_BROKERS); CREATE=1 creates missing ones
	@$(CLI) topics $(if $(CREATE),--create)

lag: build ## consumer lag per group and partition (make up, make run, or KAFKA_BROKERS [GROUP=a,b])
	@$(CLI) lag $(if $(GROUP),--group "$(GROUP)")

app: build ## create an application: make app NAME=... CALLBACK=... [ACCESS=read-write]
	@$(CLI) app create --name "$(NAME)" $(if $(CALLBACK),--callback "$(CALLBACK)") $(if $(ACCESS),--access "$(ACCESS)") $(if $(JSON),--json)

app-caps: build ## usage caps of an app (posts per UTC day / billing cycle; 0 none, default the config's): make app-caps APP=<id> [DAILY=N] [MONTHLY=N]
	@$(if $(APP),,$(error APP=<app id> is required))$(CLI) app $(if $(DAILY)$(MONTHLY),caps,usage) --id "$(APP)" $(if $(DAILY),--daily "$(DAILY)") $(if $(MONTHLY),--monthly "$(MONTHLY)") $(if $(JSON),--json)

# The password reaches the CLI through the environment, not its command line (visible to every local user).
user: export GATEWAY_USER_PASSWORD = $(PASSWORD)
user: build ## create a user: make user SCREEN_NAME=... PASSWORD=...
	@$(CLI) user create --screen-name "$(SCREEN_NAME)" --password-env GATEWAY_USER_PASSWORD $(if $(JSON),--json)

account: build ## ads account features: make account ARGS="feature grant --account ID --feature ACCOUNT_HISTORY_ACCESS" (also feature list|revoke, create --user-id)
	@$(CLI) account $(ARGS)

console: build ## open the web console as the operator (prints a single-use sign-in link and opens it)
	@$(CLI) console link --open

console-link: build ## portal link for one app's developer: make console-link APP=<app id>
	@$(if $(APP),,$(error APP=<app id> is required))$(CLI) console link --app "$(APP)"

webhooks: build ## list webhooks of every app
	@$(CLI) webhooks list

replay: build ## replay deliveries: make replay WEBHOOK=... FROM=yyyymmddhhmm TO=yyyymmddhhmm
	@$(CLI) webhooks replay --webhook "$(WEBHOOK)" --from "$(FROM)" --to "$(TO)"

deliveries: build ## delivery log: make deliveries WEBHOOK=... [STATUS=failed]
	@$(CLI) webhooks deliveries --webhook "$(WEBHOOK)" $(if $(STATUS),--status "$(STATUS)")

resend: build ## re-send logged deliveries: make resend WEBHOOK=... SINCE=ISO-time
	@$(CLI) webhooks resend --webhook "$(WEBHOOK)" --since "$(SINCE)"

publish: build ## publish activity events: make publish FILE=events.ndjson
	@$(CLI) events publish --file "$(FILE)"

types: build ## regenerate services/common/generated/schema-types.ts from schemas/
	@$(NODE) dist/scripts/gen-types.js

# test/common/nginx.test.ts fails when the file is stale.
nginx-conf: build ## regenerate deploy/nginx/nginx.conf (the compose proxy) from deploy/routes.json
	@$(NODE) dist/scripts/nginx.js --compose

readme: build ## rewrite the README's configuration table from services/common/config.ts
	@$(NODE) dist/scripts/readme-config.js

config-doc: build ## print the configuration table for the README
	@$(NODE) -e "console.log(require('./dist/services/common/config').configTableMarkdown())"

clean: ## remove build output and local state
	rm -rf dist .tap data
