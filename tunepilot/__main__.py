"""``python -m tunepilot ARGS`` is ``tune ARGS``."""

from tunepilot.ui.cli import main

if __name__ == "__main__":
    main()
