python3 -m swizzlelab.cli eval histogram --mode ranked --out /tmp/eval --budget-s 2 
