"""What a user sees and keeps: console tables and progress, MLflow, plots, the report, exports.

    console       rich tables and progress displays
    tracking      MLflow runs, the saved view, the study note
    mlflow_trial  what a trial's MLflow run holds: tags, params, metrics, its curve
    mlflow_ui     `autotune ui`: the MLflow server and the address to open
    plots         Pareto fronts and capacity curves
    report        report.md and its figures
    export        the serve line, YAML, the chosen config
    deploy        a Kubernetes Deployment sized for a target load
"""
