"""The leaderboard's pages, one module per page, each with a ``main()`` that ``app.py`` registers with
``st.navigation``. A family page only names its schema ``page`` key: what it shows comes from
``countboard/schema/*.yaml`` (see ``family.render_page``). To add a page, add a module here and a line to
``countboard.paths.LEADERBOARD_PAGES``.
"""
