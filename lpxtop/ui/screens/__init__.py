"""The app's screens: main (tables and panels), endpoint detail, help, and the signal confirmation."""
