from rsi.cli.app import main

main()
