# The two set-up commands (README.md): `make demo` runs the whole job end to end on the embedded
# default; `make test` runs the test suite (.ci/run calls the same script).
.PHONY: install demo test test-fast bench bench-setup

# What the demo needs beyond the core: [report], the figures of the page it ends with.  Not torch (it
# loads no batches) nor the rest of [all]: about 440 MB and half a minute to a minute of pip with a warm
# cache, where `make install` is 2.1 GB (tests/test_r4_demo_deps.py runs the demo with every other extra blocked).
DEMO_EXTRAS = report

install:
	bash scripts/install.sh

demo:
	bash scripts/install.sh $(DEMO_EXTRAS)
	python3 -m shardprep demo --workdir demo-out

test:
	bash scripts/test.sh

# Everything but the two process tiers (tests/e2e, and live: Slurm, torchrun, object-store servers), on an
# installed checkout; one area: python3 -m pytest tests/loader (docs/architecture.md, "Tests").
test-fast:
	env -u PYTHONDONTWRITEBYTECODE python3 -m pytest -q -n auto --dist loadfile --no-loadscope-reorder -m "not e2e and not live"

bench: install
	bash bench/run_all.sh

bench-setup:
	bash bench/setup_datatrove.sh
	bash bench/setup_s3rver.sh
	bash bench/setup_s3tools.sh
