"""What the tests and the benchmarks both use, so that neither imports the other: the model
zoo (models.py, hf_models.py, llama_export.py, big_models.py, dynamic_corpus.py,
device_peers.py, quantized.py, programs.py, small_programs.py), ExecuTorch as the baseline
(executorch.py, lowerings.py: its lowering, once per program in a session), a child
process's own peak memory (peak.py) and the fuzzing's damage to programs and archives
(damage.py).
Not installed with devplan: import it with the repository root on sys.path (pytest's
`pythonpath`, each benchmark's first lines)."""
