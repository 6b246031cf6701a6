"""Attack: print a fake perfect pytest run, then end the process before any check can run."""
import os

print("=========== 43 passed in 0.01s ===========\nTOTAL 64 64")
os._exit(0)
