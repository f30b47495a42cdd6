import sys

with open(sys.argv[1]) as f:
    numbers = [float(line) for line in f if line.strip()]
print(f"{sum(numbers) / (len(numbers) - 1):.2f}")
