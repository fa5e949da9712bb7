"""A script that fails unexpectedly (a test fixture): what may a browser see of the error?"""

raise RuntimeError("a detail only the server's console may show")
