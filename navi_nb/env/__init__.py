"""The batched multi-actor environment: kinematics, collision, rewards, tasks, resets.

``NavEnv`` (``navi_nb.env.nav_env``), its settings ``EnvConfig``
(``navi_nb.env.config``) and, with the ``gym`` extra, the Gymnasium adapter
``navi_nb.env.gym_adapter.NaviVectorEnv``. See docs/ENVIRONMENT.md.
"""


def __getattr__(name):
    if name == "NavEnv":
        from navi_nb.env.nav_env import NavEnv

        return NavEnv
    if name in ("EnvConfig", "ActionError", "EnvConfigError", "StateError"):
        from navi_nb.env import config

        return getattr(config, name)
    raise AttributeError(f"module 'navi_nb.env' has no attribute {name!r}")
