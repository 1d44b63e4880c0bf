python3 -m swizzlelab.cli eval spmv --mode profile --out /tmp/eval --budget-s 2 
