"""The HTTP side: ``create_app`` builds the Litestar app ``brain serve`` runs;
``BrainPlugin`` adds The Brain to a team's own Litestar app."""

from brain.server.app import BrainPlugin, create_app

__all__ = ["BrainPlugin", "create_app"]
