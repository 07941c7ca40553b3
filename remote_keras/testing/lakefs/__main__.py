"""`python -m remote_keras.testing.lakefs`: serves a lakeFS stand-in from its own process."""

from remote_keras.testing.lakefs.server import main

if __name__ == "__main__":
    main()
