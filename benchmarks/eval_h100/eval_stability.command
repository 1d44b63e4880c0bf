python3 benchmarks/eval_stability.py /tmp/eval --runs 3 --budget-s 4 
