"""The build's sandbox work on a Ray cluster: `engine: ray` (`microcoder data build --engine ray`).

    evaluator = RayEvaluator(config)           # what StageContext.evaluator() returns under Ray
    evaluator.evaluate(problems, samples)      # validate's reference runs, the pass-rate judging
    evaluator.map_sandboxed(function, args)    # amplify's reference answers
    evaluator.sandbox.run_programs(jobs)       # ingest's recording of an assert-style source's tests
    evaluator.close()

The stages stay on the driver: they read their input, decide what to run, and write their
files and caches there, as under `engine: local`. Only the sandbox runs leave it: each call
is cut into chunks (`ray.chunk_size` samples or inputs), sent as Ray tasks to evaluator
actors, and the results are put back in the order of the call before the driver sees them.
An actor holds one `Evaluator` (a pool of sandbox workers); by default there is one actor
per node, holding all its CPUs with as many workers (`ray.cpus_per_actor` sets smaller
actors, several per node). Each actor runs two chunks at a time with two more queued, so
that it never waits for the driver between them; a chunk goes to whichever actor has room,
so a slow node takes fewer.

The results are those of the local engine: the same Evaluator and the same sandbox judge
the same programs, with the same limits, and the driver writes what it receives in the
order of its own lists. Only measured times differ between two runs of anything (as between
two local builds); given the same adopted measurements (`validate.reference_timings_from`,
`amplify.answers_from`) the exports are the same bytes.

Faults. A task is a pure function of its arguments: it runs programs and returns verdicts,
and the driver alone writes. So an actor whose process dies (killed, out of memory, its node
lost) is restarted by Ray and its unfinished chunks are run again (`ray.max_restarts`):
nothing is lost and, since only the driver's copy of a result is written, nothing twice. When
the restarts are spent, or the cluster cannot be reached, the stage stops with one line
(`EngineFault`, a SandboxFault): never a verdict; a `host:port` address is probed first
(`ray.connect_timeout_s`), since Ray retries an unreachable one for minutes. A driver
killed mid-stage loses at most the batch it had not yet written; the rerun resumes from
the stage's caches, as a local build does.

The actors hide the driver's data directories from the programs they run, as a local
sandbox does (docs/sandbox.md): each call carries the driver's list, and an actor hides
those that exist on its node. Every node needs microcoder installed (the same version as
the driver): functions and records travel by name and by pickle.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from microcoder.evaluator.sandbox import DEFAULT_MEMORY_LIMIT_MB, DEFAULT_TIME_LIMIT_S, SandboxFault

RUNNING_PER_ACTOR = 2
"""Chunks an actor runs at once (their runs share its sandbox workers): the tail of one
chunk, when some of its workers are idle, overlaps the start of the next."""
QUEUED_PER_ACTOR = 4
"""Chunks sent to an actor before its first result is back: two more wait in its queue, so
it never waits for a busy driver to send the next."""


class EngineFault(SandboxFault):
    """The Ray engine could not do the work (no Ray, no cluster, an actor dead past its
    restarts): the stage stops with this one line, and a rerun resumes."""


def _import_ray():
    try:
        import ray
    except ImportError:
        raise EngineFault("engine: ray needs Ray installed (pip install -e '.[ray]'); "
                          "or build with --engine local") from None
    return ray


class _ActorContext:
    """What a function of `map_sandboxed` gets on an actor in place of the StageContext:
    the actor's evaluator."""

    def __init__(self, evaluator):
        self._evaluator = evaluator

    def evaluator(self):
        return self._evaluator


class EvaluatorActor:
    """One pool of sandbox workers on one node (made a Ray actor by `RayEvaluator`)."""

    def __init__(self, workers: int, time_limit_s: float):
        from microcoder.evaluator import Evaluator, EvaluatorConfig

        self.evaluator = Evaluator(EvaluatorConfig(workers=workers, time_limit_s=time_limit_s, record_test_cpu=True))
        self.workers = workers

    def _hide(self, directories: Sequence[str]) -> None:
        from microcoder.problems import remember_data_directory

        for directory in directories:
            if os.path.isdir(directory):
                remember_data_directory(directory)

    def pid(self) -> int:
        return os.getpid()

    def evaluate(self, problems: list, samples: list, directories: Sequence[str]) -> list:
        self._hide(directories)
        return self.evaluator.evaluate(problems, samples)

    def map_sandboxed(self, function: Callable, arguments: list[tuple], directories: Sequence[str]) -> list:
        self._hide(directories)
        context = _ActorContext(self.evaluator)
        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(lambda args: function(context, *args), arguments))


class GeneratorActor:
    """The pass rate's model on one GPU, or on CPU (made a Ray actor by `RayGenerator`): the
    local stage's generator, on the backend the config names (on vLLM, one engine here)."""

    def __init__(self, config, make_generator: Callable):
        self.generator = make_generator(config)

    def generate(self, problems: list, n: int, max_new_tokens: int, seed: int) -> list:
        return self.generator.generate(problems, n, max_new_tokens, seed)


class RayGenerator:
    """The difficulty stage's sampling on generation actors: one per GPU of the cluster, or
    one on CPU when the cluster has no GPU, each on the backend `difficulty.backend` names
    (`auto`: vLLM where installed and a GPU is present, `generate` otherwise). Each batch is sampled whole with its own seed, as the
    local stage samples it, so the responses, and the pass rates, are the local stage's;
    several batches are sampled at once, and come back in order."""

    def __init__(self, config, make_generator: Callable):
        """`make_generator(config)`: the local stage's model (a module-level function, found
        on the actor by name)."""
        self._ray = ray = _import_ray()
        self._settings = config.ray
        gpus = int(ray.cluster_resources().get("GPU", 0))
        # No CPU reserved: the evaluator actors hold every CPU, and on a GPU the sampling
        # waits on the GPU. On CPU it shares the cores with the judging of earlier batches.
        actor_class = ray.remote(num_cpus=0, num_gpus=1 if gpus else 0, max_restarts=self._settings.max_restarts,
                                 max_task_retries=self._settings.max_restarts)(GeneratorActor)
        self.actors = [(actor_class.remote(config, make_generator), 1) for _ in range(max(1, gpus))]

    def generate_batches(self, calls: list[tuple[list, int]], n: int, max_new_tokens: int) -> Iterator[list]:
        ray, restarts = self._ray, self._settings.max_restarts
        yield from ordered_results(ray, self.actors, lambda actor, call: actor.generate.remote(call[0], n, max_new_tokens,
                                                                                            call[1]),
                                   calls, lambda reference: fetched(ray, reference, restarts))

    def close(self) -> None:
        for actor, _ in self.actors:
            self._ray.kill(actor)
        self.actors = []


def run_program(context, source: str, stdin: str | bytes, time_limit_s: float, memory_limit_mb: int):
    """One whole program on an actor's sandbox (`ActorSandbox.run_programs`)."""
    return context.evaluator().sandbox.run_program(source, stdin, time_limit_s, memory_limit_mb)


class ActorSandbox:
    """`RayEvaluator.sandbox`: a sandbox's `run_programs` on the evaluator actors, for the
    sandbox work of reading a source (ingest recording an assert-style source's tests), so
    that it runs on the cluster too. The runs and their order are a local sandbox's."""

    def __init__(self, evaluator: "RayEvaluator"):
        self._evaluator = evaluator

    def run_programs(self, jobs: Sequence[tuple[str, str | bytes]], time_limit_s: float = DEFAULT_TIME_LIMIT_S,
                     memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB) -> list:
        """(source, stdin) pairs run on the actors; results in the order of `jobs`."""
        return self._evaluator.map_sandboxed(run_program, [(source, stdin, time_limit_s, memory_limit_mb)
                                                           for source, stdin in jobs])


class RayEvaluator:
    """The Ray engine's evaluator: `evaluate`, `map_sandboxed` and `sandbox.run_programs` on
    the cluster's evaluator actors (module docstring)."""

    def __init__(self, config):
        self._ray = ray = _import_ray()
        self._settings = config.ray
        self._started_ray = False
        if not ray.is_initialized():
            try:
                if self._settings.address is None:
                    ray.init(address="local", num_cpus=config.workers or os.cpu_count(), include_dashboard=False,
                             log_to_driver=False, configure_logging=False)
                else:
                    probe_cluster(self._settings.address, self._settings.connect_timeout_s)
                    ray.init(address=self._settings.address, log_to_driver=False, configure_logging=False)
            except (ConnectionError, RuntimeError, ValueError) as error:
                raise EngineFault(f"engine: ray could not reach the cluster "
                                  f"(ray.address={self._settings.address!r}): {str(error).splitlines()[0]}") from None
            self._started_ray = True
        self.actors = self._start_actors(config.time_limit_s)
        self._cpus = {actor: cpus for actor, cpus in self.actors}

    def _start_actors(self, time_limit_s: float) -> list[tuple[Any, int]]:
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        restarts = self._settings.max_restarts
        actor_class = ray.remote(max_restarts=restarts, max_task_retries=restarts,
                                 max_concurrency=RUNNING_PER_ACTOR)(EvaluatorActor)
        actors = []
        for node in ray.nodes():
            cpus = int(node.get("Resources", {}).get("CPU", 0)) if node.get("Alive") else 0
            size = self._settings.cpus_per_actor or cpus
            for _ in range(cpus // size if size else 0):
                strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
                actors.append((actor_class.options(num_cpus=size, scheduling_strategy=strategy)
                               .remote(size, time_limit_s), size))
        if not actors:
            raise EngineFault("engine: ray found no node with CPUs to run evaluator actors on")
        try:  # every actor up (its evaluator built) before the first chunk
            ray.get([actor.pid.remote() for actor, _ in actors], timeout=self._settings.start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise EngineFault(f"engine: ray: the evaluator actors did not start within "
                              f"{self._settings.start_timeout_s} s (ray.start_timeout_s)") from None
        return actors

    @property
    def workers(self) -> int:
        """Sandbox workers over all actors."""
        return sum(self._cpus.values())

    @property
    def sandbox(self) -> ActorSandbox:
        return ActorSandbox(self)

    def actor_pids(self) -> list[int]:
        """The process id of each actor (for a fault test: an actor's process killed)."""
        return self._ray.get([actor.pid.remote() for actor, _ in self.actors])

    def evaluate(self, problems: Mapping[str, Any] | Sequence[Any], samples: Sequence[Any],
                 on_result: Callable[[Any], None] | None = None) -> list:
        """Evaluator.evaluate on the actors: one result per sample, in the order of `samples`."""
        by_id = problems if isinstance(problems, Mapping) else {problem.id: problem for problem in problems}
        for position, sample in enumerate(samples):
            if sample.problem_id not in by_id:
                raise KeyError(f"sample {position}: unknown problem_id {sample.problem_id!r}")
        step = self._settings.chunk_size
        chunks = [list(samples[start : start + step]) for start in range(0, len(samples), step)]

        def call(actor, chunk):
            wanted = {sample.problem_id: by_id[sample.problem_id] for sample in chunk}
            return actor.evaluate.remote(list(wanted.values()), chunk, self._directories())

        results: list = []
        for chunk_results in self._ordered(call, chunks, on_result):
            results.extend(chunk_results)
        # A sample's index counts the samples of its problem before it in the whole call, as
        # the local evaluator counts them (a chunk counted only its own).
        counts: Counter[str] = Counter()
        for position, result in enumerate(results):
            results[position] = dataclasses.replace(result, sample_index=counts[result.problem_id])
            counts[result.problem_id] += 1
        return results

    def map_sandboxed(self, function: Callable, arguments: Sequence[tuple]) -> list:
        """[function(context, *args) for args in arguments] on the actors, in order; the
        context a function gets there has the actor's `evaluator()`."""
        step = self._settings.chunk_size
        chunks = [list(arguments[start : start + step]) for start in range(0, len(arguments), step)]
        results: list = []
        for chunk_results in self._ordered(lambda actor, chunk: actor.map_sandboxed.remote(
                function, chunk, self._directories()), chunks, None):
            results.extend(chunk_results)
        return results

    def _directories(self) -> tuple[str, ...]:
        from microcoder.problems import data_directories

        return data_directories()

    def _ordered(self, call: Callable, chunks: list[list], on_result: Callable[[Any], None] | None) -> Iterator[list]:
        for results in ordered_results(self._ray, self.actors, call, chunks, self._result_of):
            if on_result is not None:
                for result in results:
                    on_result(result)
            yield results

    def _result_of(self, reference: Any) -> list:
        return fetched(self._ray, reference, self._settings.max_restarts)

    def close(self) -> None:
        ray = self._ray
        for actor, _ in self.actors:
            ray.kill(actor)
        self.actors = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False


def probe_cluster(address: str, timeout_s: float) -> None:
    """An EngineFault, within `timeout_s`, when the cluster's `host:port` (`ray://host:port`)
    accepts no TCP connection: `ray.init` would retry it for minutes. Other forms (`auto`)
    are Ray's to resolve."""
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as error:
        raise EngineFault(f"engine: ray could not reach the cluster at ray.address={address!r} within "
                          f"{timeout_s} s (ray.connect_timeout_s): {error}") from None


def ordered_results(ray, actors: list[tuple[Any, int]], call: Callable, items: list,
                    result_of: Callable[[Any], Any]) -> Iterator[Any]:
    """`result_of(call(actor, item))` for each item, in the order of `items`, each as soon as
    it and those before it are back; an item goes to whichever actor has room
    (QUEUED_PER_ACTOR each)."""
    waiting = deque(range(len(items)))
    in_flight: dict[Any, tuple[int, Any]] = {}
    load: Counter = Counter()
    done: dict[int, Any] = {}
    next_out = 0
    try:
        while waiting or in_flight:
            for actor, _ in actors:
                while waiting and load[actor] < QUEUED_PER_ACTOR:
                    index = waiting.popleft()
                    in_flight[call(actor, items[index])] = (index, actor)
                    load[actor] += 1
            (ready,), _ = ray.wait(list(in_flight), num_returns=1)
            index, actor = in_flight.pop(ready)
            load[actor] -= 1
            done[index] = result_of(ready)
            while next_out in done:
                yield done.pop(next_out)
                next_out += 1
    finally:
        for reference in in_flight:  # the stage stopped: what is queued need not run
            try:
                ray.cancel(reference)
            except Exception:  # noqa: BLE001 - best effort: the actors are killed on close anyway
                pass


def fetched(ray, reference: Any, max_restarts: int) -> Any:
    """A task's result; its own exception (a SandboxFault) raised as it is, a lost actor or
    node as one EngineFault line."""
    try:
        return ray.get(reference)
    except ray.exceptions.RayTaskError as error:
        cause = getattr(error, "cause", None)
        if isinstance(cause, BaseException):
            raise cause from None
        raise EngineFault(f"engine: ray: a task failed: {str(error).splitlines()[0]}") from None
    except ray.exceptions.RayError as error:  # an actor dead past its restarts, a lost node
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise EngineFault(f"engine: ray: an actor was lost after {max_restarts} restarts "
                          f"(ray.max_restarts): {type(error).__name__}: {first}") from None
