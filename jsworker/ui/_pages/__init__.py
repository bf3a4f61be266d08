"""The dashboard's pages, a module each: what it reads through Admin, and the actions it offers."""
