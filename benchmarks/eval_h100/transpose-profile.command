python3 -m swizzlelab.cli eval transpose --mode profile --out /tmp/eval --budget-s 2 
