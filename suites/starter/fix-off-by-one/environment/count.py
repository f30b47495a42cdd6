import sys

limit = int(sys.argv[1])
for k in range(1, limit):
    print(k)
