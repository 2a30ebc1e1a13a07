"""A mixed corpus for smart-collection tests: work/programming, personal health and workouts,
hobby cars (66 notes), each with the category a user would give it."""

from __future__ import annotations

WORK = [
    "Profiled the Python API and found the slow database query behind the latency spikes",
    "Performance optimization: added a Redis cache in front of the pricing service",
    "Rewrote the hot loop in the parser with numpy, making it ten times faster",
    "Code review of the payment module: too many nested callbacks, asked for async/await",
    "Set up continuous integration so unit tests run on every pull request",
    "Tuned the PostgreSQL indexes for the reporting queries; the dashboard loads in a second",
    "Reduced memory usage of the batch job by streaming rows instead of loading them all",
    "Migrated the frontend build from webpack to vite to speed up compilation",
    "Debugged a race condition in the job scheduler with thread sanitizer",
    "Wrote a benchmark for the search endpoint to track throughput and p95 latency",
    "Split the monolith's billing code into its own service behind a queue",
    "Optimized the Docker image size for the backend from 1.2 GB to 300 MB",
    "Paired with Dana on refactoring the authentication middleware in Django",
    "Added connection pooling to the service, which removed the timeouts under load",
    "Planned the sprint: latency budget for the checkout API and a profiling session",
    "Fixed a memory leak in the websocket server caused by unclosed handlers",
    "Introduced type hints and mypy in the data pipeline repository",
    "Cached compiled regular expressions in the log parser to cut CPU time",
    "Load tested the recommendation service: it scales linearly to eight workers",
    "Documented the deployment runbook for the Kubernetes cluster",
    "Replaced the ORM N+1 queries in the orders page with a single join",
    "Code optimization session: vectorised the scoring function in the ranking service",
]
HEALTH = [
    "Doctor said my blood pressure is fine but I should sleep more",
    "Started taking vitamin D in the winter months",
    "Booked the annual dental check-up for next month",
    "Feeling tired after lunch; cutting down on sugar",
    "Allergy season: the antihistamines help with the sneezing",
    "Drinking two litres of water a day has helped with headaches",
    "Meditation before bed improves my sleep quality",
    "Blood test results: iron is a bit low, eat more spinach",
    "Physiotherapist gave me stretches for the lower back pain",
    "Trying to keep a regular bedtime at eleven",
]
WORKOUT = [
    "Workout: 5 km run in 27 minutes, new personal best",
    "Workout: squats and deadlifts, increased the weight by 5 kg",
    "Workout: interval training on the bike for 30 minutes",
    "Workout: swimming 40 lengths, shoulders felt strong",
    "Workout: rest day with light yoga and stretching",
    "Workout: hill sprints, legs were sore afterwards",
    "Workout: bench press 3x8 and pull-ups",
    "Workout: long run of 12 km at an easy pace",
    "Workout: core circuit with planks and crunches",
    "Workout: rowing machine 2000 m test",
    "Workout: kettlebell swings and lunges",
    "Workout: tempo run, improving running performance",
]
CARS = [
    "Changed the oil and filter on the Miata this weekend",
    "Looking at coilovers to improve the handling of the car",
    "The classic Mustang needs a new carburetor",
    "Went to the track day; lap times improved by two seconds",
    "Detailing the car: clay bar and a coat of wax",
    "Replaced the brake pads and flushed the brake fluid",
    "Watched a video about turbocharger maintenance",
    "Bought winter tyres for the hatchback",
    "The engine makes a ticking noise when cold, maybe the lifters",
    "Car meet on Sunday with the local roadster club",
    "Adjusted the tyre pressures for better grip at the track",
    "Restoring the rust on the rear wheel arches",
    "Comparing exhaust systems for a better engine sound",
    "Timing belt replacement is due at 100,000 km",
    "Tuned the engine map for more torque",
    "Planning a road trip through the mountains in the roadster",
    "Installed a new stereo in the old car",
    "Washed the car and cleaned the leather seats",
    "Found a second-hand hardtop for the convertible",
    "Aligned the wheels after hitting a pothole",
    "The clutch feels heavy; checking the hydraulic line",
    "Fitted new headlights with better beam pattern",
]

CORPUS: list[tuple[str, str]] = (
    [(t, "work.programming") for t in WORK]
    + [(t, "personal.health") for t in HEALTH]
    + [(t, "workout.training") for t in WORKOUT]
    + [(t, "hobbies.cars") for t in CARS]
)
