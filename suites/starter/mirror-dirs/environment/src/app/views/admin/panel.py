def panel():
    return 'admin'
