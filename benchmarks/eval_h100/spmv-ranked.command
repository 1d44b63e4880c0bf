python3 -m swizzlelab.cli eval spmv --mode ranked --out /tmp/eval --budget-s 2 
