python3 -m swizzlelab.cli eval transpose --mode ranked --out /tmp/eval --budget-s 2 
