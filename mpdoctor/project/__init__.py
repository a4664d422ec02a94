"""What mpdoctor knows about the user's project, beyond one file: its modules and the dtype policies that flow into
them from its entry points (the project analysis), and the TensorFlow/Keras each file is judged against (the
target: the configuration, the project's declared requirements, the file's own evidence, the installed
environment). Static: nothing of the project is imported or run.

Empty on purpose: a run imports only the modules it uses (most runs find no project to analyse).
"""
