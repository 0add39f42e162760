"""The local profile's model server: the real local engine (llama.cpp) for `engine:
llama.cpp` candidates, real vLLM's CPU build for `engine: vllm` on this host (`instance_type:
local.host`), the engine emulator for every other (cloud) candidate."""

from __future__ import annotations

from pathlib import Path

from servingbench.resources.contract.candidate import Candidate
from servingbench.resources.contract.scope import ClusterInfo
from servingbench.resources.model_server import engines
from servingbench.resources.model_server.interface import ModelServer


class LocalModelServers(ModelServer):
    def __init__(self, emulator: ModelServer, llamacpp: ModelServer | None = None,
                 vllm: ModelServer | None = None):
        self.emulator = emulator
        self.llamacpp = llamacpp
        self.vllm = vllm

    def server_for(self, candidate: Candidate) -> ModelServer:
        if engines.local(candidate.engine):
            if self.llamacpp is None:
                # imported on first use: the emulated demo never loads the engine's adapter
                from servingbench.resources.model_server.local.llamacpp import LlamaCppModelServer
                self.llamacpp = LlamaCppModelServer()
            return self.llamacpp
        if engines.runs_here(candidate.engine, candidate.instance_type):  # vLLM's CPU build
            if self.vllm is None:
                from servingbench.resources.model_server.local.vllm_cpu import VllmModelServer
                self.vllm = VllmModelServer()
            return self.vllm
        return self.emulator

    def refuses(self, candidate: Candidate) -> str | None:
        return self.server_for(candidate).refuses(candidate)

    def deploy(self, candidate: Candidate, cluster: ClusterInfo, run_dir: Path):
        return self.server_for(candidate).deploy(candidate, cluster, run_dir)
