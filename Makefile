# The two set-up commands (README.md): `make demo` runs the whole job end to end on the embedded
# default; `make test` runs the test suite (.ci/run calls the same script).
.PHONY: install demo test bench bench-setup

install:
	bash scripts/install.sh

demo: install
	python3 -m shardprep demo --workdir demo-out

test:
	bash scripts/test.sh

bench: install
	bash bench/run_all.sh

bench-setup:
	bash bench/setup_datatrove.sh
	bash bench/setup_s3rver.sh
	bash bench/setup_s3tools.sh
