"""vLLM 0.33.0's `serve` options as data (options_table.py) and its parser's type functions (argtypes.py).

The core package owns them so `validate` checks flags offline without the `sim` extra. The stand-in
image (orchestrator/sim/standin/) carries byte-identical copies, since it must run with the standard
library alone; tests/unit/test_vllm_flags_offline.py fails when the two drift, and
orchestrator/sim/standin/gen_options.py writes both.
"""
