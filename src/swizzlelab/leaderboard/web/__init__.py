"""The leaderboard's web pages: server-rendered HTML (Jinja2, a little JS) on the service's FastAPI app.

`mount(app, settings)` adds the pages; the service's create_app calls it when this package is present.
"""

from swizzlelab.leaderboard.web.pages import mount

__all__ = ["mount"]
