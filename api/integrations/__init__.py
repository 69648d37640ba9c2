"""citewise inside other frameworks: retrievers for llama-index and LangChain that call a
citewise server, so that an application built on either gets cited, permission-checked
passages without keeping an index of its own.

Each module imports its framework, which is an optional extra (``citewise[llamaindex]``,
``citewise[langchain]``); nothing else in citewise imports them.
"""
