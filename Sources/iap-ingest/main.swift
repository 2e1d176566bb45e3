import Foundation
import WorkerApp

exit(await Workers.ingest())
