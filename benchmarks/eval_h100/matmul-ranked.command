python3 -m swizzlelab.cli eval matmul --mode ranked --out /tmp/eval --budget-s 2 
