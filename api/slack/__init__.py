"""The Slack bot: a client of citewise's HTTP API that answers in channels, threads and DMs.

* ``render.py``: an answer as Slack blocks (steps with their commands, links for ``[n]``, a
  Sources block, split at Slack's limits);
* ``api.py``: the citewise HTTP API as the bot calls it, through ``citewise_client`` (its own
  key, the asker's identity), and its errors as one sentence for the person;
* ``people.py``: who is asking (Slack user -> email -> citewise principal and groups);
* ``threads.py``: which citewise conversation a Slack thread is;
* ``bot.py``: the Bolt app: triggers, acknowledgement, posting, feedback, errors.
"""
