python3 -m swizzlelab.cli eval matmul --mode profile --out /tmp/eval --budget-s 2 
