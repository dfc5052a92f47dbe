"""Browser tests: `course lab` driven by Playwright through Debian's Chromium."""
