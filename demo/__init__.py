"""The demo fleet: simulated hands that use the real REST API through the project's client, so a
new user sees every state on the board (`manage.py demo_fleet`, started by scripts/run). It sits
above every app it shows and nothing imports it."""
