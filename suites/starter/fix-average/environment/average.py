import sys

with open(sys.argv[1]) as f:
    vals = [float(line) for line in f if line.strip()]
print(f"{sum(vals) / (len(vals) - 1):.2f}")
