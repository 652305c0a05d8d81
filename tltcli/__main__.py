"""`python -m tltcli` = `tlt`."""

from tltcli import main

main()
