%% dist_bench: the cluster workloads of bench/lua/cluster.lua on Erlang
%% distribution, for bench/erlang/dist.sh (two BEAM nodes on this machine,
%% `erl -sname`, epmd, each `+S 2:2` as tycho's nodes run 2 workers).
%%   peer   registers `sink` (counts messages) and `echo` (answers calls),
%%          prints READY, runs until the driver stops it
%%   msgs N SENDERS processes on the driver each send N/SENDERS small
%%          messages (integers) to {sink, Peer}; the rate is N over the time
%%          from the first send to the sink's report that all N arrived
%%   call N one caller makes N sequential calls (send, receive the reply by
%%          its ref: what gen_server:call does, without its monitor), p50 and
%%          p99; then CALLERS callers make N calls in all
%% Prints RESULT / DETAIL / NOTE lines as bench/run.sh wants them.
-module(dist_bench).
-export([peer/0, main/1]).

-define(SENDERS, 4).
-define(CALLERS, 32).

peer() ->
    register(sink, spawn(fun sink/0)),
    register(echo, spawn(fun echo/0)),
    register(peer_main, self()),
    io:format("READY~n"),
    receive stop -> erlang:halt(0) end.

sink() ->
    receive
        {expect, Want, From} -> count(Want, 0, From), sink()
    end.

count(Want, Want, From) -> From ! {all, Want};
count(Want, Got, From) -> receive _ -> count(Want, Got + 1, From) end.

echo() ->
    receive
        {call, From, Ref, X} -> From ! {Ref, X}, echo()
    end.

main([Role, PeerS, NS]) ->
    Peer = list_to_atom(PeerS),
    pong = wait_peer(Peer, 200),
    N = list_to_integer(NS),
    case Role of
        "msgs" -> msgs(Peer, N);
        "call" -> call(Peer, N)
    end,
    {peer_main, Peer} ! stop,
    erlang:halt(0).

wait_peer(_Peer, 0) -> pang;
wait_peer(Peer, K) ->
    case net_adm:ping(Peer) of
        pong -> pong;
        pang -> timer:sleep(20), wait_peer(Peer, K - 1)
    end.

now_us() -> erlang:monotonic_time(microsecond).

msgs(Peer, N0) ->
    Per = N0 div ?SENDERS,
    N = Per * ?SENDERS,
    Sink = {sink, Peer},
    Sink ! {expect, N, self()},
    T0 = now_us(),
    [spawn(fun() -> send_n(Sink, Per) end) || _ <- lists:seq(1, ?SENDERS)],
    receive {all, N} -> ok after 120000 -> erlang:halt(2) end,
    Dt = (now_us() - T0) / 1.0e6,
    io:format("RESULT ~w msgs/s~n", [round(N / Dt)]),
    io:format("DETAIL wall_s=~.3f~n", [Dt]),
    io:format("NOTE ~p senders on one node, one sink on another, ~p messages, "
              "Erlang distribution (one TCP connection)~n", [?SENDERS, N]).

send_n(_Sink, 0) -> ok;
send_n(Sink, I) -> Sink ! I, send_n(Sink, I - 1).

one_call(Echo, X) ->
    Ref = make_ref(),
    Echo ! {call, self(), Ref, X},
    receive {Ref, R} -> R end.

call(Peer, N) ->
    Echo = {echo, Peer},
    [one_call(Echo, I) || I <- lists:seq(1, 1000)],
    T0 = now_us(),
    Lat = [begin S = now_us(), one_call(Echo, I), now_us() - S end
           || I <- lists:seq(1, N)],
    Seq = N / ((now_us() - T0) / 1.0e6),
    Sorted = list_to_tuple(lists:sort(Lat)),
    P50 = element(max(1, round(N * 0.5)), Sorted),
    P99 = element(max(1, round(N * 0.99)), Sorted),
    Per = N div ?CALLERS,
    Self = self(),
    T1 = now_us(),
    [spawn(fun() -> [one_call(Echo, I) || I <- lists:seq(1, Per)], Self ! done end)
     || _ <- lists:seq(1, ?CALLERS)],
    [receive done -> ok end || _ <- lists:seq(1, ?CALLERS)],
    Conc = Per * ?CALLERS / ((now_us() - T1) / 1.0e6),
    io:format("RESULT ~w roundtrips/s~n", [round(Seq)]),
    io:format("DETAIL p50_us=~p p99_us=~p concurrent_rps=~w~n", [P50, P99, round(Conc)]),
    io:format("NOTE one caller, ~p sequential calls; then ~p callers; "
              "Erlang distribution~n", [N, ?CALLERS]).
