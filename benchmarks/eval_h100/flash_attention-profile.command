python3 -m swizzlelab.cli eval flash_attention --mode profile --out /tmp/eval --budget-s 2 
