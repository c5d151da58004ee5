"""Scheduled tasks at run time: the scheduler that fires them as turns, the model's tools,
the /schedules card, the console's view, and the rules every view of a chat's tasks reads."""
