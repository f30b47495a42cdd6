import sys


def add(x, y):
    return x - y


print(add(int(sys.argv[1]), int(sys.argv[2])))
