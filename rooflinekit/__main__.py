"""`python -m rooflinekit` runs the command-line interface (also under torchrun)."""

from rooflinekit.cli.main import main

if __name__ == "__main__":
    main()
