pytest_plugins = ["tests.functional.gabbi_plugin"]
