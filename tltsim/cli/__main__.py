"""`python -m tltsim.cli` = `tlt`."""

from tltsim.cli import main

main()
