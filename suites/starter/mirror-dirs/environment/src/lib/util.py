def noop():
    pass
