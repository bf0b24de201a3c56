"""MLflow's server with one page of autotune's: `/autotune/open`, the address `autotune ui` prints.

MLflow 3.17 picks its UI mode (GenAI or model training) from the address's `workflowType`, else
from the browser's local storage, `mlflow.workflowType_v1`, which starts as GenAI and which
only MLflow's own mode switch writes (its frontend bundle: `useLocalStorage({key:
"mlflow.workflowType", version: 1, initialValue: GENAI})`). Links inside MLflow drop the
address's mode, so a trial clicked in the runs table opened in GenAI mode ("Evaluations").
This page, on MLflow's own origin, stores the model-training mode the way the switch does and
goes on to the study's runs view; every trial opened from there stays in that mode.

`autotune ui` runs `mlflow ui --app-name autotune` (entry point `mlflow.app`); the module is
only imported in that server's process.
"""

from __future__ import annotations

import json

from flask import Response, request
from mlflow.server import app as flask_app
from mlflow.server.fastapi_app import app

OPEN_PATH = "/autotune/open"
MODE_KEY = "mlflow.workflowType_v1"
MODE = "machine_learning"


def open_page(to: str) -> str:
    """The page: store the model-training mode, then replace itself with `to` (an address in
    MLflow's single-page app: "#/experiments/...")."""
    return ("<!doctype html><meta charset=utf-8><title>autotune</title><script>"
            f"try {{ localStorage.setItem({json.dumps(MODE_KEY)}, "
            f"{json.dumps(json.dumps(MODE))}); }} catch (e) {{}}"
            f"location.replace({json.dumps('/' + to)});</script>")


@flask_app.route(OPEN_PATH)
def _open() -> Response:
    to = request.args.get("to", "#/")
    if not to.startswith("#/"):  # only MLflow's own pages: never a redirect elsewhere
        return Response("to: an MLflow address starting with #/", status=400,
                        mimetype="text/plain")
    return Response(open_page(to), mimetype="text/html")


__all__ = ["app"]
