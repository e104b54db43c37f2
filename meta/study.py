"""A search's Optuna study: where it is stored, checked against the search before any training.

`hparams_search` keeps its study in `hydra.sweeper.storage`, an SQLAlchemy URL: SQLite under
the search's results_dir by default (`sqlite:///<results_dir>/optuna.db`), PostgreSQL or MySQL
for launchers on several machines. The same command on the same storage and study name
continues the study. Optuna is the `[search]` extra's, imported only here and by the sweeper.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from meta.algorithm.registry import validate
from meta.config import Config
from meta.errors import first_line, without_passwords
from meta.run.names import command

if TYPE_CHECKING:
    import optuna

UPGRADE = "optuna storage upgrade --storage"


def storage_url(url: str) -> tuple[str, Path | None]:
    """The URL with a relative SQLite file made absolute (from the working directory), and the file.

    The file is None for other databases and for memory; a URL SQLAlchemy cannot read raises
    ValueError.
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as error:  # ValueError: a port that is no number
        given = without_passwords(url)
        raise ValueError(
            f"hydra.sweeper.storage: cannot read {given!r} as an SQLAlchemy URL "
            f"(dialect+driver://user:password@host/database): {first_line(error)}"
        ) from None
    if not parsed.drivername.startswith("sqlite") or parsed.database in (None, "", ":memory:"):
        return url, None
    path = Path(parsed.database).expanduser().absolute()  # type: ignore[arg-type]
    return parsed.set(database=str(path)).render_as_string(hide_password=False), path


def shown(url: str) -> str:
    """The storage's URL as printed: without its password."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def directions_of(direction: object) -> list[str]:
    """`maximize`, `Direction.maximize` or a list of them, as Optuna's names."""
    given = direction if isinstance(direction, list | tuple) else [direction]
    return [str(getattr(d, "name", d)).split(".")[-1].lower() for d in given]


def check_search(config: Config, sweeper: dict[str, Any]) -> None:
    """Raise ValueError for a search whose configuration or study storage is unusable."""
    validate(config)
    if sweeper.get("storage") is not None:
        directions = directions_of(sweeper.get("direction"))
        check_study(str(sweeper["storage"]), sweeper.get("study_name"), directions)


def check_study(url: str, name: str | None, directions: Sequence[str]) -> None:
    """Raise ValueError if the storage cannot be opened or holds `name` with other directions.

    A new SQLite file's folder is created (the sweeper creates the file).
    """
    url, path = storage_url(url)
    if path is not None and not path.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ValueError(f"hydra.sweeper.storage: cannot create {path} ({error})") from None
        return
    study = _stored_directions(url, name)
    if study is not None and study != list(directions):
        raise ValueError(
            f"hydra.sweeper.study_name={name}: the study stored in {shown(url)} is to "
            f"{'/'.join(study)}, this search's hydra.sweeper.direction is "
            f"{'/'.join(directions)} (give another study_name or storage)"
        )


def _stored_directions(url: str, name: str | None) -> list[str] | None:
    """The directions of the study `name` in the storage at `url`, None if it has none.

    SQLAlchemy opens the storage and reads its schema's version first; Optuna (seconds to
    import) only reads a study's, from a storage of its own schema, which it then leaves as it is.
    """
    import sqlalchemy

    engine = None
    try:
        engine = sqlalchemy.create_engine(url)
        tables = sqlalchemy.inspect(engine).get_table_names()
        version = None
        if "alembic_version" in tables:
            with engine.connect() as connection:
                query = sqlalchemy.text("SELECT version_num FROM alembic_version")
                version = connection.execute(query).scalar()
    except Exception as error:  # SQLAlchemy's and the drivers' errors are many: all are the URL
        raise ValueError(
            f"hydra.sweeper.storage: cannot open {shown(url)} "
            f"({type(error).__name__}: {first_line(error)})"
        ) from None
    finally:
        if engine is not None:
            engine.dispose()
    _check_schema(url, version)
    if name is None or "studies" not in tables:
        return None
    try:
        storage = rdb_storage(url)
    except RuntimeError as error:  # Optuna's own check of a schema it cannot read
        raise ValueError(f"hydra.sweeper.storage: {shown(url)}: {first_line(error)}") from None
    try:
        study_id = storage.get_study_id_from_name(name)
    except KeyError:
        return None
    return [d.name.lower() for d in storage.get_study_directions(study_id)]


def _check_schema(url: str, version: str | None) -> None:
    """Raise ValueError for a storage whose schema is not the one this Optuna writes.

    No version: a database Optuna has not written to, or is writing to at this moment.
    """
    import optuna

    reference = optuna.storages.RDBStorage("sqlite:///:memory:")
    head, known = reference.get_head_version(), reference.get_all_versions()
    if version is None or version == head:
        return
    where = shown(url)
    if version in known:
        password = " (your password in place of ***)" if "***" in where else ""
        raise ValueError(
            f"hydra.sweeper.storage: {where} holds studies of an older Optuna (schema "
            f"{version}; Optuna {optuna.__version__} reads {head}) and was "
            f"left as it is; upgrade it with: {command(*UPGRADE.split(), where)}{password}"
        )
    raise ValueError(
        f"hydra.sweeper.storage: {where} holds studies of a newer Optuna (schema {version}, "
        f"unknown to Optuna {optuna.__version__}) and was left as it is; install that Optuna"
    )


def open_storage(url: str, name: str | None, directions: Sequence[str]) -> str:
    """The checked, absolute URL of the study's storage, its SQLite folder created."""
    check_study(url, name, directions)
    return storage_url(url)[0]


def rdb_storage(url: str, attempts: int = 5) -> optuna.storages.RDBStorage:
    """Optuna's storage at the checked `url`, its tables made if new.

    Two searches that open a new database at once both create its tables, and on PostgreSQL
    the second then fails on a table or type the first has just made: it tries again, and
    finds them.
    """
    import optuna
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    for attempt in range(1, attempts):
        try:
            return optuna.storages.RDBStorage(url)
        except (IntegrityError, ProgrammingError):
            time.sleep(0.1 * attempt)
    return optuna.storages.RDBStorage(url)
