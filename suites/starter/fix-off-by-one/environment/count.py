import sys

n = int(sys.argv[1])
for i in range(1, n):
    print(i)
