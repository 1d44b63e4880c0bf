python3 -m swizzlelab.cli eval histogram --mode profile --out /tmp/eval --budget-s 2 
