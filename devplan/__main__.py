from devplan.cli import main

main()
