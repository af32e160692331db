"""`recipe import`: a sparkrun or eugr/spark-vllm-docker recipe read into a spark-deploy recipe.

Both peers keep a `vllm serve` command template filled from `defaults`; the template is parsed with vLLM's
own option table (config/vllm_flags.py), so every flag gets the verdict `validate` gives, and each key of
the source is either written (with a comment saying where it came from) or listed as not mapped, with why.
"""
